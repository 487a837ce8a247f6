//! Publishing from Python: the converter's build directories, cleaning stale
//! ones, and concatenating stores. The GIL is released around all of it.

use std::path::PathBuf;
use std::sync::Mutex;

use loaderx_gather::THREADS;
use pyo3::prelude::*;
use zrecord::BuildDir;

use crate::errors::{invalid_argument, IntoPy};

/// A locked build directory beside `dest`, published or removed the way a
/// store's is (the converter builds its tree of stores in one, which is why
/// stores may be created inside it).
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
        let dir = py.detach(|| BuildDir::create_tree(&dest)).py_err()?;
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
            None => Err(invalid_argument(
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
