//! The native store writer, and the checks and codec tools the Python package
//! runs on host arrays: this layer borrows the arrays, releases the GIL, and
//! leaves every rule to the format crate.

use std::path::PathBuf;
use std::sync::Mutex;

use loaderx_gather::THREADS;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use zrecord::{RaggedView, Schema, Source, Writer};

use crate::convert::{host_bytes, parse_codec, parse_dtype};
use crate::dlpack::typed;
use crate::errors::{invalid_argument, IntoPy};

#[pyclass(module = "loaderx._native", name = "Writer", frozen)]
pub struct PyWriter {
    // Boxed: the writer is 64-byte aligned (its xxh3 states), more than Python
    // aligns the objects it allocates (see the assertions in lib.rs).
    inner: Mutex<Option<Box<Writer>>>,
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
            invalid_argument("the writer is closed; a closed writer cannot append")
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
            inner: Mutex::new(Some(Box::new(w))),
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
            data_shards.into(),
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
        let schema = Schema::ragged(
            parse_dtype(dtype)?,
            ndim,
            parse_codec(codec)?,
            data_shards.into(),
        )
        .py_err()?;
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
        return Err(invalid_argument(
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
