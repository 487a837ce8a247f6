//! Native store reader and writer. This layer converts arguments and results and
//! releases the GIL around the work; the engine decides how a gather runs and the
//! format crate what is valid.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use loaderx_gather::{gather, Block, Placement, THREADS};
use loaderx_remote::{Cache, Canceller, Pending, RemoteStore};
use numpy::{
    PyArray1, PyArrayDescrMethods, PyReadonlyArray1, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use zrecord::{
    BuildDir, Codec, DType, Kind, RaggedLayout, RaggedView, ReadOptions, Schema, Source, Store,
    StoreInfo, Writer,
};

use crate::allocator::PyPlacement;
use crate::dlpack::{typed, DLTensor, Memory};
use crate::errors::{invalid_argument, IntoPy};

fn parse_dtype(name: &str) -> PyResult<DType> {
    DType::from_name(name).ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {name}")))
}

fn parse_codec(name: &str) -> PyResult<Codec> {
    Codec::from_name(name).ok_or_else(|| PyValueError::new_err(format!("unknown codec {name:?}")))
}

/// The bytes of a host array: a C-contiguous NumPy array or a host DLTensor.
fn host_bytes<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(t) = obj.cast::<DLTensor>() {
        let t: &DLTensor = t.get();
        let bytes = t.host_bytes()?;
        // SAFETY: the tensor object is borrowed for 'a and keeps its block alive.
        return Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) });
    }
    let arr = obj
        .cast::<PyUntypedArray>()
        .map_err(|_| PyTypeError::new_err("expected a NumPy array or a loaderx DLTensor"))?;
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err("the array must be C-contiguous"));
    }
    let nbytes = arr.len() * arr.dtype().itemsize();
    if nbytes == 0 {
        return Ok(&[]);
    }
    // SAFETY: a C-contiguous array of `len` items of `itemsize` bytes starts at
    // `data`; the array object is borrowed for 'a, which keeps the memory alive.
    Ok(unsafe {
        let data = (*arr.as_array_ptr()).fields.data as *const u8;
        std::slice::from_raw_parts(data, nbytes)
    })
}

/// Record positions from a 1-D uint64 or int64 array, copied so that the array may
/// change while the GIL is released without affecting the gather.
fn positions(idx: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Ok(a) = idx.extract::<PyReadonlyArray1<'_, u64>>() {
        return Ok(a.as_slice()?.to_vec());
    }
    if let Ok(a) = idx.extract::<PyReadonlyArray1<'_, i64>>() {
        let s = a.as_slice()?;
        return s
            .iter()
            .map(|&v| {
                u64::try_from(v).map_err(|_| {
                    pyo3::exceptions::PyIndexError::new_err(format!(
                        "position {v} is negative; positions are 0..len-1"
                    ))
                })
            })
            .collect();
    }
    Err(PyTypeError::new_err(
        "positions must be a contiguous 1-D int64 or uint64 array",
    ))
}

/// Per-record logical and stored byte counts.
type SizeArrays<'py> = (Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<u64>>);
/// Where a store's records come from: its local files, or object storage.
enum Backend {
    Local(Arc<Store>),
    Remote(Arc<RemoteStore>),
}

#[pyclass(module = "loaderx._native", name = "Store", frozen)]
pub struct PyStore {
    backend: Backend,
}

impl PyStore {
    fn new(backend: Backend) -> Self {
        PyStore { backend }
    }

    /// What the store's small files say, whichever the backend.
    fn store(&self) -> &StoreInfo {
        match &self.backend {
            Backend::Local(s) => s.info(),
            Backend::Remote(r) => r.meta().info(),
        }
    }

    /// The records at `idx` in one block of `placement`, with the GIL released.
    fn records(
        &self,
        py: Python<'_>,
        idx: &[u64],
        placement: &Placement,
    ) -> PyResult<(Block, Option<RaggedLayout>)> {
        match &self.backend {
            Backend::Local(store) => py
                .detach(|| gather::records(store, idx, placement))
                .py_err(),
            Backend::Remote(remote) => py.detach(|| remote.records(idx, placement)).py_err(),
        }
    }

    fn dense(
        &self,
        py: Python<'_>,
        idx: &[u64],
        shape: Vec<i64>,
        allocator: &PyPlacement,
    ) -> PyResult<DLTensor> {
        self.check_kind(Kind::Dense)?;
        let (block, _) = self.records(py, idx, allocator.placement())?;
        Ok(DLTensor::pooled(block, shape, self.store().schema().dtype))
    }

    fn check_kind(&self, want: Kind) -> PyResult<()> {
        match (self.store().schema().kind, want) {
            (Kind::Dense, Kind::Dense) | (Kind::Ragged, Kind::Ragged) => Ok(()),
            (_, Kind::Dense) => Err(PyTypeError::new_err("a Dense gather on a Ragged store")),
            _ => Err(PyTypeError::new_err("a Ragged gather on a Dense store")),
        }
    }

    /// A Ragged gather's block as `(values, cu_seqlens, shapes)`.
    fn ragged(
        &self,
        block: Block,
        layout: Option<RaggedLayout>,
    ) -> PyResult<(DLTensor, DLTensor, DLTensor)> {
        let layout =
            layout.ok_or_else(|| PyTypeError::new_err("a Ragged gather on a Dense store"))?;
        let block = Arc::new(Memory::Pooled(block));
        let dtype = self.store().schema().dtype;
        let n = layout.records as i64;
        Ok((
            DLTensor::new(block.clone(), 0, vec![layout.elements as i64], dtype),
            DLTensor::new(block.clone(), layout.cu_offset, vec![n + 1], DType::I32),
            DLTensor::new(
                block,
                layout.shapes_offset,
                vec![n, layout.ndim as i64],
                DType::U64,
            ),
        ))
    }

    fn remote(&self) -> PyResult<&Arc<RemoteStore>> {
        match &self.backend {
            Backend::Remote(r) => Ok(r),
            Backend::Local(_) => Err(invalid_argument(
                "a local store gathers at once; only a remote store begins a gather".into(),
            )),
        }
    }

    /// A begun gather's block, once its bytes are in, with the GIL released.
    fn finish(
        &self,
        py: Python<'_>,
        pending: &PyPending,
        placement: &Placement,
    ) -> PyResult<(usize, Block, Option<RaggedLayout>)> {
        let remote = self.remote()?;
        let p = pending
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| invalid_argument("this gather was already finished".into()))?;
        let n = p.len();
        let (block, layout) = py.detach(|| remote.finish(p, placement)).py_err()?;
        Ok((n, block, layout))
    }
}

/// A gather begun on a remote store (`Store.begin`): its records' bytes are on
/// their way. `Store.finish_dense` / `finish_ragged` take it once; dropping it
/// unfinished cancels its requests.
#[pyclass(module = "loaderx._native", name = "PendingGather", frozen)]
pub struct PyPending {
    inner: Mutex<Option<Pending>>,
    canceller: Canceller,
}

#[pymethods]
impl PyPending {
    /// Cancels the gather's requests still in flight; finishing it then fails.
    /// Works while another thread waits in `finish`; a no-op once it finished.
    fn cancel(&self) {
        self.canceller.cancel();
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
        Ok(PyStore::new(Backend::Local(Arc::new(store))))
    }

    /// Opens the store at `url` in object storage. `options` are storage options
    /// as strings; `cache_dir`, when given, keeps fetched blocks there, at most
    /// `cache_max_bytes` of blocks of `cache_block_bytes` each. Gathers always
    /// check every record's checksum.
    #[staticmethod]
    #[pyo3(signature = (url, options, cache_dir=None, cache_max_bytes=0, cache_block_bytes=loaderx_remote::DEFAULT_CACHE_BLOCK_BYTES))]
    fn open_url(
        py: Python<'_>,
        url: String,
        options: Vec<(String, String)>,
        cache_dir: Option<PathBuf>,
        cache_max_bytes: u64,
        cache_block_bytes: u64,
    ) -> PyResult<Self> {
        let remote = py
            .detach(|| {
                let cache = cache_dir
                    .map(|d| Cache::open(&d, cache_max_bytes, cache_block_bytes).map(Arc::new))
                    .transpose()?;
                RemoteStore::open(&url, &options, cache)
            })
            .py_err()?;
        Ok(PyStore::new(Backend::Remote(Arc::new(remote))))
    }

    /// The URL a remote store was opened from; None for a local store.
    #[getter]
    fn url(&self) -> Option<String> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Remote(r) => Some(r.url().to_string()),
        }
    }

    /// The header's own checksum: it covers every other file's checksum, so it
    /// identifies the store's exact contents.
    #[getter]
    fn header_checksum(&self) -> u64 {
        self.store().header().checksum
    }

    /// The format version the store was written with.
    #[getter]
    fn format_version(&self) -> u32 {
        self.store().header().version
    }

    /// The size of each data file, as the header records it.
    #[getter]
    fn data_file_sizes(&self) -> Vec<u64> {
        self.store().header().shard_sizes.clone()
    }

    /// Whether gathers verify each record's checksum.
    #[getter]
    fn checked(&self) -> bool {
        self.store().options().checked
    }

    /// The stored attributes (JSON bytes), or None.
    fn attrs<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.store().attrs().map(|a| PyBytes::new(py, a))
    }

    fn __len__(&self) -> usize {
        self.store().len() as usize
    }

    #[getter]
    fn kind(&self) -> &'static str {
        match self.store().schema().kind {
            Kind::Dense => "dense",
            Kind::Ragged => "ragged",
        }
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.store().schema().dtype.name()
    }

    #[getter]
    fn item_shape(&self) -> Vec<u64> {
        self.store().schema().item_shape.clone()
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.store().schema().ndim
    }

    #[getter]
    fn codec(&self) -> &'static str {
        self.store().schema().codec.name()
    }

    #[getter]
    fn data_shards(&self) -> u8 {
        self.store().schema().data_shards
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.store().path().to_path_buf()
    }

    /// Dense records at `idx` as one `(len(idx), *item_shape)` tensor.
    fn gather_dense(
        &self,
        py: Python<'_>,
        idx: &Bound<'_, PyAny>,
        allocator: PyRef<'_, PyPlacement>,
    ) -> PyResult<DLTensor> {
        let idx = positions(idx)?;
        let mut shape = vec![idx.len() as i64];
        shape.extend(self.store().schema().item_shape.iter().map(|&d| d as i64));
        self.dense(py, &idx, shape, &allocator)
    }

    /// One Dense record, without the batch axis.
    fn get_dense(
        &self,
        py: Python<'_>,
        pos: u64,
        allocator: PyRef<'_, PyPlacement>,
    ) -> PyResult<DLTensor> {
        let shape = self
            .store()
            .schema()
            .item_shape
            .iter()
            .map(|&d| d as i64)
            .collect();
        self.dense(py, &[pos], shape, &allocator)
    }

    /// Ragged records at `idx` as `(values, cu_seqlens, shapes)` in one allocation.
    fn gather_ragged(
        &self,
        py: Python<'_>,
        idx: &Bound<'_, PyAny>,
        allocator: PyRef<'_, PyPlacement>,
    ) -> PyResult<(DLTensor, DLTensor, DLTensor)> {
        self.check_kind(Kind::Ragged)?;
        let idx = positions(idx)?;
        let (block, layout) = self.records(py, &idx, allocator.placement())?;
        self.ragged(block, layout)
    }

    /// Starts a remote store's gather of the records at `idx` and returns at
    /// once: the records' bytes are fetched (or read from the cache) while the
    /// caller goes on. Positions are checked here.
    fn begin(&self, py: Python<'_>, idx: &Bound<'_, PyAny>) -> PyResult<PyPending> {
        let remote = self.remote()?;
        let idx = positions(idx)?;
        let pending = py.detach(|| remote.begin(&idx)).py_err()?;
        Ok(PyPending {
            canceller: pending.canceller(),
            inner: Mutex::new(Some(pending)),
        })
    }

    /// A begun Dense gather as one `(n, *item_shape)` tensor.
    fn finish_dense(
        &self,
        py: Python<'_>,
        pending: PyRef<'_, PyPending>,
        allocator: PyRef<'_, PyPlacement>,
    ) -> PyResult<DLTensor> {
        self.check_kind(Kind::Dense)?;
        let (n, block, _) = self.finish(py, &pending, allocator.placement())?;
        let mut shape = vec![n as i64];
        shape.extend(self.store().schema().item_shape.iter().map(|&d| d as i64));
        Ok(DLTensor::pooled(block, shape, self.store().schema().dtype))
    }

    /// A begun Ragged gather as `(values, cu_seqlens, shapes)`.
    fn finish_ragged(
        &self,
        py: Python<'_>,
        pending: PyRef<'_, PyPending>,
        allocator: PyRef<'_, PyPlacement>,
    ) -> PyResult<(DLTensor, DLTensor, DLTensor)> {
        self.check_kind(Kind::Ragged)?;
        let (_, block, layout) = self.finish(py, &pending, allocator.placement())?;
        self.ragged(block, layout)
    }

    /// Checks every record's checksum and decoding.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        match &self.backend {
            Backend::Local(store) => py.detach(|| gather::verify(store)).py_err(),
            Backend::Remote(remote) => py.detach(|| remote.verify()).py_err(),
        }
    }

    /// The part of `verify` that is not per record: the index checksum and the
    /// data files' sizes.
    fn verify_files(&self, py: Python<'_>) -> PyResult<()> {
        match &self.backend {
            Backend::Local(store) => py.detach(|| store.verify_files()).py_err(),
            Backend::Remote(remote) => py.detach(|| remote.verify_files()).py_err(),
        }
    }

    /// `verify` of records `start..stop` only.
    fn verify_records(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<()> {
        match &self.backend {
            Backend::Local(store) => py
                .detach(|| gather::verify_records(store, start..stop))
                .py_err(),
            Backend::Remote(remote) => py.detach(|| remote.verify_records(start..stop)).py_err(),
        }
    }

    /// The logical and stored byte counts of records `start..stop`, from the
    /// index alone, as two uint64 arrays.
    fn record_sizes<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        stop: u64,
    ) -> PyResult<SizeArrays<'py>> {
        let backend = &self.backend;
        let len = self.store().len();
        let (logical, stored) = py
            .detach(|| {
                let n = usize::try_from(stop.saturating_sub(start)).unwrap_or(usize::MAX);
                let n = n.min(usize::try_from(len).unwrap_or(usize::MAX));
                let oom = |_| zrecord::Error::OutOfMemory {
                    bytes: n.saturating_mul(8),
                };
                let (mut logical, mut stored) = (Vec::new(), Vec::new());
                logical.try_reserve_exact(n).map_err(oom)?;
                stored.try_reserve_exact(n).map_err(oom)?;
                let each = |l, s| {
                    logical.push(l);
                    stored.push(s);
                };
                match backend {
                    Backend::Local(store) => store.record_sizes(start..stop, each)?,
                    Backend::Remote(r) => r.meta().record_sizes(start..stop, each)?,
                }
                Ok::<_, zrecord::Error>((logical, stored))
            })
            .py_err()?;
        Ok((
            PyArray1::from_vec(py, logical),
            PyArray1::from_vec(py, stored),
        ))
    }

    /// The `zstd_dict` dictionary, or None.
    fn dictionary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(self.store().dictionary().map(|d| PyBytes::new(py, d)))
    }
}

#[pyclass(module = "loaderx._native", name = "Writer", frozen)]
pub struct PyWriter {
    inner: Mutex<Option<Writer>>,
}

impl PyWriter {
    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Writer) -> zrecord::Result<R> + Send,
    ) -> PyResult<R>
    where
        R: Send,
    {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let w = guard.as_mut().ok_or_else(|| {
            PyValueError::new_err("the writer is closed; a closed writer cannot append")
        })?;
        py.detach(|| f(w)).py_err()
    }

    fn start(
        py: Python<'_>,
        path: PathBuf,
        schema: Schema,
        dict: Option<Vec<u8>>,
        attrs: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let w = py
            .detach(|| {
                let mut w = Writer::create(&path, schema, dict.as_deref())?;
                if let Some(a) = attrs {
                    // A refusal drops the writer, which removes its build directory.
                    w.set_attrs(&a)?;
                }
                Ok::<_, zrecord::Error>(w)
            })
            .py_err()?;
        Ok(PyWriter {
            inner: Mutex::new(Some(w)),
        })
    }
}

fn source(release: bool) -> Source {
    if release {
        Source::ReadOnlyFileMapping
    } else {
        Source::Memory
    }
}

#[pymethods]
impl PyWriter {
    #[staticmethod]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one to one
    #[pyo3(signature = (path, dtype, item_shape, codec, data_shards, dict=None, attrs=None))]
    fn create_dense(
        py: Python<'_>,
        path: PathBuf,
        dtype: &str,
        item_shape: Vec<u64>,
        codec: &str,
        data_shards: u8,
        dict: Option<Vec<u8>>,
        attrs: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let schema = Schema::dense(
            parse_dtype(dtype)?,
            &item_shape,
            parse_codec(codec)?,
            data_shards,
        )
        .py_err()?;
        Self::start(py, path, schema, dict, attrs)
    }

    #[staticmethod]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments, one to one
    #[pyo3(signature = (path, dtype, ndim, codec, data_shards, dict=None, attrs=None))]
    fn create_ragged(
        py: Python<'_>,
        path: PathBuf,
        dtype: &str,
        ndim: usize,
        codec: &str,
        data_shards: u8,
        dict: Option<Vec<u8>>,
        attrs: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let schema =
            Schema::ragged(parse_dtype(dtype)?, ndim, parse_codec(codec)?, data_shards).py_err()?;
        Self::start(py, path, schema, dict, attrs)
    }

    /// Appends `n` Dense records from a C-contiguous array or host DLTensor.
    /// `release_source` promises the memory is a read-only file mapping.
    #[pyo3(signature = (data, n, release_source=false))]
    fn append_dense(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        n: usize,
        release_source: bool,
    ) -> PyResult<()> {
        let bytes = host_bytes(data)?;
        self.with(py, |w| {
            w.append_dense(n, bytes, source(release_source), &THREADS)
        })
    }

    /// Appends a packed ragged batch given as three host arrays.
    #[pyo3(signature = (values, cu_seqlens, shapes, release_source=false))]
    fn append_ragged(
        &self,
        py: Python<'_>,
        values: &Bound<'_, PyAny>,
        cu_seqlens: &Bound<'_, PyAny>,
        shapes: &Bound<'_, PyAny>,
        release_source: bool,
    ) -> PyResult<()> {
        let view = RaggedView {
            values: host_bytes(values)?,
            cu_seqlens: typed::<i32>(host_bytes(cu_seqlens)?, "cu_seqlens")?,
            shapes: typed::<u64>(host_bytes(shapes)?, "shapes")?,
        };
        self.with(py, |w| {
            w.append_ragged(&view, source(release_source), &THREADS)
        })
    }

    fn __len__(&self) -> usize {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map_or(0, |w| w.len() as usize)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Publishes the store. Closing twice is a no-op.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let w = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        match w {
            Some(w) => py.detach(|| w.finish()).py_err(),
            None => Ok(()),
        }
    }

    /// Discards everything; nothing is published.
    fn abort(&self, py: Python<'_>) {
        let w = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = w {
            py.detach(|| w.abort());
        }
    }
}

/// Validates a packed ragged batch without writing it (used by RaggedBatch).
#[pyfunction]
pub fn check_ragged(
    values: &Bound<'_, PyAny>,
    cu_seqlens: &Bound<'_, PyAny>,
    shapes: &Bound<'_, PyAny>,
    itemsize: usize,
    ndim: usize,
) -> PyResult<()> {
    let view = RaggedView {
        values: host_bytes(values)?,
        cu_seqlens: typed::<i32>(host_bytes(cu_seqlens)?, "cu_seqlens")?,
        shapes: typed::<u64>(host_bytes(shapes)?, "shapes")?,
    };
    view.check(itemsize, ndim).py_err()
}

/// Trains a zstd dictionary of at most `max_size` bytes from samples laid end to
/// end in `data` (a host array), `sizes` giving each sample's length in bytes.
#[pyfunction]
pub fn train_dictionary<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    sizes: Vec<usize>,
    max_size: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = host_bytes(data)?;
    if sizes.iter().sum::<usize>() != bytes.len() {
        return Err(PyValueError::new_err(
            "sample sizes do not add up to the data length",
        ));
    }
    let dict = py
        .detach(|| zrecord::train_dictionary(bytes, &sizes, max_size))
        .py_err()?;
    Ok(PyBytes::new(py, &dict))
}

/// The bytes `codec` would store for the records laid end to end in `data` (a
/// host array), `sizes` giving each record's length in bytes.
#[pyfunction]
#[pyo3(signature = (codec, data, sizes, dict=None))]
pub fn encoded_size(
    py: Python<'_>,
    codec: &str,
    data: &Bound<'_, PyAny>,
    sizes: Vec<usize>,
    dict: Option<Vec<u8>>,
) -> PyResult<u64> {
    let codec = parse_codec(codec)?;
    let bytes = host_bytes(data)?;
    py.detach(|| zrecord::encoded_size(codec, dict.as_deref(), bytes, &sizes))
        .py_err()
}

/// A locked build directory beside `dest`, published or removed the way a
/// store's is (the converter builds its tree of stores in one).
#[pyclass(module = "loaderx._native", name = "BuildDir", frozen)]
pub struct PyBuildDir {
    inner: Mutex<Option<BuildDir>>,
    path: PathBuf,
}

impl PyBuildDir {
    fn take(&self) -> Option<BuildDir> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[pymethods]
impl PyBuildDir {
    #[new]
    fn new(py: Python<'_>, dest: PathBuf) -> PyResult<Self> {
        let dir = py.detach(|| BuildDir::create(&dest)).py_err()?;
        Ok(PyBuildDir {
            path: dir.path().to_path_buf(),
            inner: Mutex::new(Some(dir)),
        })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Renames the directory into place (see `zrecord::BuildDir::publish`). Once
    /// called, whatever it raised, the directory is no longer this object's.
    fn publish(&self, py: Python<'_>) -> PyResult<()> {
        match self.take() {
            Some(dir) => py.detach(|| dir.publish()).py_err(),
            None => Err(PyValueError::new_err(
                "the build directory was already published or discarded",
            )),
        }
    }

    /// Removes the directory and everything in it; nothing once published.
    fn discard(&self, py: Python<'_>) {
        if let Some(dir) = self.take() {
            py.detach(|| drop(dir));
        }
    }
}

/// Removes the build directories inside `parent` that no live writer holds, and
/// returns their paths.
#[pyfunction]
pub fn clean_stale(py: Python<'_>, parent: PathBuf) -> PyResult<Vec<PathBuf>> {
    py.detach(|| zrecord::clean_stale(&parent)).py_err()
}

/// The exception for a position outside `0..len`, worded as the core words it.
#[pyfunction]
pub fn out_of_range(index: &Bound<'_, PyAny>, len: u64) -> PyResult<PyErr> {
    let shown = index.str()?.to_string();
    Ok(crate::errors::out_of_range(zrecord::out_of_range_message(
        shown, len,
    )))
}

/// What `concat` published: path, records, data files, linked files, copied
/// files, copied bytes, header checksum.
type ConcatSummary = (PathBuf, u64, usize, usize, usize, u64, u64);

/// Publishes at `dest` one store holding the records of `sources` in order,
/// without decoding them (see `zrecord::concat`). `attrs` are the result's
/// attributes (JSON bytes; empty: none; None: the sources' own, which must agree);
/// `progress(done, total)` is called with records done, and an exception it
/// raises stops the concatenation and is raised from here.
#[pyfunction]
#[pyo3(signature = (sources, dest, attrs=None, verify=false, copy=false, progress=None))]
pub fn concat(
    py: Python<'_>,
    sources: Vec<PathBuf>,
    dest: PathBuf,
    attrs: Option<Vec<u8>>,
    verify: bool,
    copy: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<ConcatSummary> {
    let options = zrecord::ConcatOptions {
        attrs: attrs.as_deref(),
        verify_records: verify,
        copy,
    };
    let mut raised: Option<PyErr> = None;
    let result = py.detach(|| {
        let mut report = |done: u64, total: u64| -> zrecord::Result<()> {
            let Some(cb) = &progress else {
                return Ok(());
            };
            Python::attach(|py| cb.call1(py, (done, total)).map(drop)).map_err(|e| {
                raised = Some(e);
                // Replaced by the callback's own exception below.
                zrecord::Error::InvalidArgument("the progress callback raised".into())
            })
        };
        zrecord::concat(&sources, &dest, &options, &THREADS, &mut report)
    });
    if let Some(e) = raised {
        return Err(e);
    }
    let r = result.py_err()?;
    Ok((
        r.path,
        r.records,
        r.data_files,
        r.linked_files,
        r.copied_files,
        r.copied_bytes,
        r.header_checksum,
    ))
}

/// Uploads the published store at `local` to `url`, header last (see
/// `loaderx_remote::upload`).
#[pyfunction]
#[pyo3(signature = (local, url, options, overwrite=false))]
pub fn upload(
    py: Python<'_>,
    local: PathBuf,
    url: String,
    options: Vec<(String, String)>,
    overwrite: bool,
) -> PyResult<()> {
    py.detach(|| loaderx_remote::upload(&local, &url, &options, overwrite))
        .py_err()
}

/// Whether `path` is a URL of a remote store rather than a local path.
#[pyfunction]
pub fn is_url(path: &str) -> bool {
    loaderx_remote::is_url(path)
}
