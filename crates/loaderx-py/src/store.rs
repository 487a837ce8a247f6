//! The native store reader: one record source, local or remote, behind one
//! class. This layer converts arguments and results and releases the GIL around
//! the work; the engine decides how a gather runs and the format crate what is
//! valid.

use std::path::PathBuf;
use std::sync::Arc;

use loaderx_gather::{Allocator, Begun, Block, RecordSource, Records};
use loaderx_remote::{Cache, RemoteStore};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use zrecord::{Kind, RaggedLayout, ReadOptions, Store, StoreInfo};

use crate::allocator::PyAllocator;
use crate::convert::{positions, storage_options};
use crate::dlpack::{DLTensor, Memory};
use crate::errors::{invalid_argument, wrong_type, IntoPy};
use crate::tally::Tally;

/// Per-record logical and stored byte counts.
type SizeArrays<'py> = (Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<u64>>);

#[pyclass(module = "loaderx._native", name = "Store", frozen)]
pub struct PyStore {
    // Shared with the gathers begun on it, which keep the store open until they end.
    source: Arc<dyn RecordSource>,
}

impl PyStore {
    fn info(&self) -> &StoreInfo {
        self.source.info()
    }

    /// The records at `idx` in one block of `allocator`, with the GIL released.
    fn records(&self, py: Python<'_>, idx: &[u64], allocator: &Allocator) -> PyResult<Records> {
        py.detach(|| self.source.records(idx, allocator)).py_err()
    }

    fn check_kind(&self, want: Kind) -> PyResult<()> {
        match (self.info().schema().kind, want) {
            (Kind::Dense, Kind::Dense) | (Kind::Ragged, Kind::Ragged) => Ok(()),
            (_, Kind::Dense) => Err(wrong_type("a Dense gather on a Ragged store")),
            _ => Err(wrong_type("a Ragged gather on a Dense store")),
        }
    }

    /// A Dense gather's block as one `(n, *shape)` tensor.
    fn dense(&self, block: Block, mut shape: Vec<i64>, tally: Option<&Tally>) -> DLTensor {
        let schema = self.info().schema();
        shape.extend(schema.item_shape.iter().map(|&d| d as i64));
        let tensor = DLTensor::pooled(block, shape, schema.dtype);
        if let Some(t) = tally {
            t.add(tensor.nbytes());
        }
        tensor
    }

    /// A Ragged gather's block as `(values, cu_seqlens, shapes)`.
    fn ragged(
        &self,
        block: Block,
        layout: Option<RaggedLayout>,
        tally: Option<&Tally>,
    ) -> PyResult<(DLTensor, DLTensor, DLTensor)> {
        let layout = layout.ok_or_else(|| wrong_type("a Ragged gather on a Dense store"))?;
        let block = Arc::new(Memory::Pooled(block));
        let dtype = self.info().schema().dtype;
        let n = layout.records as i64;
        let values = DLTensor::new(block.clone(), 0, vec![layout.elements as i64], dtype);
        if let Some(t) = tally {
            t.add(values.nbytes());
        }
        Ok((
            values,
            DLTensor::new(
                block.clone(),
                layout.cu_offset,
                vec![n + 1],
                zrecord::DType::I32,
            ),
            DLTensor::new(
                block,
                layout.shapes_offset,
                vec![n, layout.ndim as i64],
                zrecord::DType::U64,
            ),
        ))
    }

    /// A begun gather's records once they are in, with the GIL released.
    fn finish(&self, py: Python<'_>, pending: &PyPending) -> PyResult<(usize, Records)> {
        let begun = &pending.begun;
        let records = py.detach(|| begun.finish()).py_err()?;
        Ok((begun.len(), records))
    }
}

/// A gather begun by `Store.begin`: a local store's runs on the background
/// gather thread, a remote store's records' bytes are on their way.
/// `Store.finish_dense` / `finish_ragged` take it once; dropping it unfinished
/// cancels what has not started.
#[pyclass(module = "loaderx._native", name = "PendingGather", frozen)]
pub struct PyPending {
    begun: Box<dyn Begun>,
}

#[pymethods]
impl PyPending {
    /// Cancels what has not happened yet (requests in flight, a background
    /// gather not started); finishing it then fails. Works while another
    /// thread waits in `finish`; a no-op once it finished.
    fn cancel(&self) {
        self.begun.cancel();
    }

    /// Whether finishing it would not wait.
    #[getter]
    fn ready(&self) -> bool {
        self.begun.is_ready()
    }

    /// Nanoseconds the background gather thread spent on it, once it ran;
    /// None before, and for a remote store's gather, whose work is done when
    /// it is finished.
    #[getter]
    fn work_ns(&self) -> Option<u64> {
        self.begun
            .work_time()
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

#[pymethods]
impl PyStore {
    /// Opens the store at `path`; `checked` verifies each gathered record's
    /// stored bytes against its checksum.
    #[staticmethod]
    #[pyo3(signature = (path, checked=false))]
    fn open(py: Python<'_>, path: PathBuf, checked: bool) -> PyResult<Self> {
        let options = ReadOptions { checked };
        let store = py.detach(|| Store::open_with(&path, options)).py_err()?;
        Ok(PyStore {
            source: Arc::new(store),
        })
    }

    /// Opens the store at `url` in object storage. `options` are storage options
    /// (a dict of names to strings, integers, floats and booleans);
    /// `cache_dir`, when given, keeps fetched blocks there, at most
    /// `cache_max_bytes` of blocks of `cache_block_bytes` each. Gathers always
    /// check every record's checksum.
    #[staticmethod]
    #[pyo3(signature = (url, options, cache_dir=None, cache_max_bytes=0, cache_block_bytes=loaderx_remote::DEFAULT_CACHE_BLOCK_BYTES))]
    fn open_url(
        py: Python<'_>,
        url: String,
        options: &Bound<'_, PyAny>,
        cache_dir: Option<PathBuf>,
        cache_max_bytes: u64,
        cache_block_bytes: u64,
    ) -> PyResult<Self> {
        let options = storage_options(options)?;
        let remote = py
            .detach(|| {
                let cache = cache_dir
                    .map(|d| Cache::open(&d, cache_max_bytes, cache_block_bytes).map(Arc::new))
                    .transpose()?;
                RemoteStore::open(&url, &options, cache)
            })
            .py_err()?;
        Ok(PyStore {
            source: Arc::new(remote),
        })
    }

    /// The URL a remote store was opened from; None for a local store.
    #[getter]
    fn url(&self) -> Option<String> {
        self.source.url().map(str::to_string)
    }

    /// `(bytes fetched from object storage, bytes read from the block cache)`
    /// by this store's reads in this process; `(0, 0)` for a local store.
    fn traffic(&self) -> (u64, u64) {
        self.source.traffic()
    }

    /// The header's own checksum: it covers every other file's checksum, so it
    /// identifies the store's exact contents.
    #[getter]
    fn header_checksum(&self) -> u64 {
        self.info().header().checksum
    }

    /// The format version the store was written with.
    #[getter]
    fn format_version(&self) -> u32 {
        self.info().header().version
    }

    /// The size of each data file, as the header records it.
    #[getter]
    fn data_file_sizes(&self) -> Vec<u64> {
        self.info().header().shard_sizes.clone()
    }

    /// The size of the index file: an entry per record, as the header and
    /// the schema say (nothing is read).
    #[getter]
    fn index_bytes(&self) -> u64 {
        let entry = self.info().schema().entry_size() as u64;
        self.info().len().saturating_mul(entry)
    }

    /// Whether gathers verify each record's checksum.
    #[getter]
    fn checked(&self) -> bool {
        self.info().options().checked
    }

    /// The stored attributes (JSON bytes), or None.
    fn attrs<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.info().attrs().map(|a| PyBytes::new(py, a))
    }

    fn __len__(&self) -> usize {
        self.info().len() as usize
    }

    #[getter]
    fn kind(&self) -> &'static str {
        match self.info().schema().kind {
            Kind::Dense => "dense",
            Kind::Ragged => "ragged",
        }
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.info().schema().dtype.name()
    }

    #[getter]
    fn item_shape(&self) -> Vec<u64> {
        self.info().schema().item_shape.clone()
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.info().schema().ndim
    }

    #[getter]
    fn codec(&self) -> &'static str {
        self.info().schema().codec.name()
    }

    #[getter]
    fn data_shards(&self) -> u32 {
        self.info().schema().data_shards
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.info().path().to_path_buf()
    }

    /// Dense records at `idx` as one `(len(idx), *item_shape)` tensor; its
    /// bytes are added to `tally` when one is given.
    #[pyo3(signature = (idx, allocator, tally=None))]
    fn gather_dense(
        &self,
        py: Python<'_>,
        idx: &Bound<'_, PyAny>,
        allocator: PyRef<'_, PyAllocator>,
        tally: Option<PyRef<'_, Tally>>,
    ) -> PyResult<DLTensor> {
        self.check_kind(Kind::Dense)?;
        let idx = positions(idx, self.info().len())?;
        let (block, _) = self.records(py, &idx, allocator.allocator())?;
        Ok(self.dense(block, vec![idx.len() as i64], tally.as_deref()))
    }

    /// One Dense record, without the batch axis.
    fn get_dense(
        &self,
        py: Python<'_>,
        pos: u64,
        allocator: PyRef<'_, PyAllocator>,
    ) -> PyResult<DLTensor> {
        self.check_kind(Kind::Dense)?;
        let (block, _) = self.records(py, &[pos], allocator.allocator())?;
        Ok(self.dense(block, Vec::new(), None))
    }

    /// Ragged records at `idx` as `(values, cu_seqlens, shapes)` in one
    /// allocation; the values' bytes are added to `tally` when one is given.
    #[pyo3(signature = (idx, allocator, tally=None))]
    fn gather_ragged(
        &self,
        py: Python<'_>,
        idx: &Bound<'_, PyAny>,
        allocator: PyRef<'_, PyAllocator>,
        tally: Option<PyRef<'_, Tally>>,
    ) -> PyResult<(DLTensor, DLTensor, DLTensor)> {
        self.check_kind(Kind::Ragged)?;
        let idx = positions(idx, self.info().len())?;
        let (block, layout) = self.records(py, &idx, allocator.allocator())?;
        self.ragged(block, layout, tally.as_deref())
    }

    /// Starts the gather of the records at `idx` into a block of `allocator`
    /// and returns at once: a local store's runs on the background gather
    /// thread behind those begun before it; a remote store's bytes are fetched
    /// (or read from the cache) while the caller goes on. Positions are
    /// checked here.
    fn begin(
        &self,
        py: Python<'_>,
        idx: &Bound<'_, PyAny>,
        allocator: PyRef<'_, PyAllocator>,
    ) -> PyResult<PyPending> {
        let idx = positions(idx, self.info().len())?;
        let (source, allocator) = (self.source.clone(), allocator.allocator().clone());
        let begun = py.detach(|| source.begin(idx, allocator)).py_err()?;
        Ok(PyPending { begun })
    }

    /// Begins fetching, in the background, what a gather of the records at
    /// `idx` will need (a remote store's index and data blocks, into memory and
    /// its cache), and returns at once; what any gather returns is unchanged.
    /// Returns how many steps the call covers, this one first: 0 when nothing
    /// was begun (the blocks fetched ahead and not yet used fill the store's
    /// `read_ahead_bytes`, enough warms run, or the last warm to end found
    /// everything held and those still running will tell whether that
    /// holds) and the caller asks again later, for the same step; 1 when it
    /// began, and always for a local store, which has nothing to fetch;
    /// `n > 1` when the warms before found everything held, so the next
    /// `n - 1` steps need no warm either.
    fn warm(&self, py: Python<'_>, idx: &Bound<'_, PyAny>) -> PyResult<u64> {
        let idx = positions(idx, self.info().len())?;
        py.detach(|| self.source.warm(&idx)).py_err()
    }

    /// Stops what `warm` began and frees its budget.
    fn cancel_warm(&self) {
        self.source.cancel_warm();
    }

    /// A begun Dense gather as one `(n, *item_shape)` tensor, counted in
    /// `tally` as `gather_dense` counts.
    #[pyo3(signature = (pending, tally=None))]
    fn finish_dense(
        &self,
        py: Python<'_>,
        pending: PyRef<'_, PyPending>,
        tally: Option<PyRef<'_, Tally>>,
    ) -> PyResult<DLTensor> {
        self.check_kind(Kind::Dense)?;
        let (n, (block, _)) = self.finish(py, &pending)?;
        Ok(self.dense(block, vec![n as i64], tally.as_deref()))
    }

    /// A begun Ragged gather as `(values, cu_seqlens, shapes)`, counted in
    /// `tally` as `gather_ragged` counts.
    #[pyo3(signature = (pending, tally=None))]
    fn finish_ragged(
        &self,
        py: Python<'_>,
        pending: PyRef<'_, PyPending>,
        tally: Option<PyRef<'_, Tally>>,
    ) -> PyResult<(DLTensor, DLTensor, DLTensor)> {
        self.check_kind(Kind::Ragged)?;
        let (_, (block, layout)) = self.finish(py, &pending)?;
        self.ragged(block, layout, tally.as_deref())
    }

    /// Checks every record's checksum and decoding.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.source.verify()).py_err()
    }

    /// The part of `verify` that is not per record: the index checksum and the
    /// data files' sizes.
    fn verify_files(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.source.verify_files()).py_err()
    }

    /// `verify` of records `start..stop` only.
    fn verify_records(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<()> {
        py.detach(|| self.source.verify_records(start..stop))
            .py_err()
    }

    /// The logical and stored byte counts of records `start..stop`, from the
    /// index alone, as two uint64 arrays.
    fn record_sizes<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        stop: u64,
    ) -> PyResult<SizeArrays<'py>> {
        let sizes = py
            .detach(|| self.source.record_sizes(start..stop))
            .py_err()?;
        Ok((
            PyArray1::from_vec(py, sizes.logical),
            PyArray1::from_vec(py, sizes.stored),
        ))
    }

    /// The length along axis 0 of each Ragged record in `start..stop`, from the
    /// index alone, as one uint64 array.
    fn record_lengths<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        stop: u64,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let lengths = py
            .detach(|| self.source.record_lengths(start..stop))
            .py_err()?;
        Ok(PyArray1::from_vec(py, lengths))
    }

    /// The `zstd_dict` dictionary, or None.
    fn dictionary<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.info().dictionary().map(|d| PyBytes::new(py, d))
    }
}

/// Uploads the published store at `local` to `url`, header last (see
/// `loaderx_remote::upload`); `options` as for `Store.open_url`.
#[pyfunction]
#[pyo3(signature = (local, url, options, overwrite=false))]
pub fn upload(
    py: Python<'_>,
    local: PathBuf,
    url: String,
    options: &Bound<'_, PyAny>,
    overwrite: bool,
) -> PyResult<()> {
    let options = storage_options(options)?;
    py.detach(|| loaderx_remote::upload(&local, &url, &options, overwrite))
        .py_err()
}

/// Publishes one store per `(parts, dest, attrs)` from part stores in object
/// storage under `root`, data files copied by the storage, every header last
/// (see `loaderx_remote::concat_remote`); returns each result's record count.
#[pyfunction]
pub fn concat_urls(
    py: Python<'_>,
    root: String,
    jobs: Vec<(Vec<String>, String, Vec<u8>)>,
    options: &Bound<'_, PyAny>,
) -> PyResult<Vec<u64>> {
    let options = storage_options(options)?;
    let jobs: Vec<_> = jobs
        .into_iter()
        .map(|(parts, dest, attrs)| loaderx_remote::RemoteConcat { parts, dest, attrs })
        .collect();
    py.detach(|| loaderx_remote::concat_remote(&root, &jobs, &options))
        .py_err()
}

/// The URLs among `urls` (under `root`) with any object under them.
#[pyfunction]
pub fn occupied(
    py: Python<'_>,
    root: String,
    urls: Vec<String>,
    options: &Bound<'_, PyAny>,
) -> PyResult<Vec<String>> {
    let options = storage_options(options)?;
    py.detach(|| loaderx_remote::occupied(&root, &urls, &options))
        .py_err()
}

/// Writes `data` as the object at `url`, replacing it.
#[pyfunction]
pub fn put_object(
    py: Python<'_>,
    url: String,
    data: Vec<u8>,
    options: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let options = storage_options(options)?;
    py.detach(|| loaderx_remote::put_object(&url, data, &options))
        .py_err()
}

/// Removes the engine job prefixes under `root` whose newest object is at least
/// `older_than` seconds old; returns their URLs.
#[pyfunction]
pub fn clean_jobs(
    py: Python<'_>,
    root: String,
    older_than: f64,
    options: &Bound<'_, PyAny>,
) -> PyResult<Vec<String>> {
    let options = storage_options(options)?;
    let older_than = std::time::Duration::try_from_secs_f64(older_than)
        .map_err(|_| invalid_argument("older_than must be a number of seconds >= 0"))?;
    py.detach(|| loaderx_remote::clean_jobs(&root, older_than, &options))
        .py_err()
}

/// Removes every object under the prefix `url`; returns how many there were.
#[pyfunction]
pub fn remove_prefix(py: Python<'_>, url: String, options: &Bound<'_, PyAny>) -> PyResult<u64> {
    let options = storage_options(options)?;
    py.detach(|| loaderx_remote::remove_prefix(&url, &options))
        .py_err()
}

/// Whether `path` is a URL of a remote store rather than a local path. A str
/// that is not Unicode text (with lone surrogates, as Python holds undecodable
/// bytes) is judged by its text, so that its caller, not this, refuses it.
#[pyfunction]
pub fn is_url(path: &Bound<'_, PyString>) -> bool {
    loaderx_remote::is_url(&path.to_string_lossy())
}

/// The exception for a position outside `0..len`, worded as the core words it.
#[pyfunction]
pub fn out_of_range(index: &Bound<'_, PyAny>, len: u64) -> PyResult<PyErr> {
    let shown = index.str()?.to_string();
    Ok(crate::errors::out_of_range(zrecord::out_of_range_message(
        shown, len,
    )))
}
