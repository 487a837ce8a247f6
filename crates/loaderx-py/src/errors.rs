//! The one place where Python exceptions are made. The classes live in the
//! pure-Python `loaderx.errors`, where users read them, and are reached here
//! through typed handles; each subclasses the standard exception its failure
//! has always raised, so `except ValueError` and the like keep working. The rest
//! of the bindings never name an exception class: they return the crates'
//! errors (`IntoPy`) or call the function below that says what went wrong.
//! `tests/package/test_native_errors.py` keeps it that way.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyTypeInfo;

pyo3::import_exception!(loaderx.errors, InvalidArgumentError);
pyo3::import_exception!(loaderx.errors, OutOfRangeError);
pyo3::import_exception!(loaderx.errors, StoreNotFoundError);
pyo3::import_exception!(loaderx.errors, StoreExistsError);
pyo3::import_exception!(loaderx.errors, ZrecordError);
pyo3::import_exception!(loaderx.errors, StorageError);
pyo3::import_exception!(loaderx.errors, PublishedNotDurableError);
pyo3::import_exception!(loaderx.errors, OutOfMemoryError);
pyo3::import_exception!(loaderx.errors, DeviceError);
pyo3::import_exception!(loaderx.errors, MissingDependencyError);
pyo3::import_exception!(loaderx.errors, InternalError);

/// Imports `loaderx.errors` when the native module is initialised. A typed
/// handle imports its class on first use and panics if it cannot; with the
/// module imported here, a broken installation fails the import of
/// `loaderx._native` instead, and every later use finds the module loaded.
pub fn init(py: Python<'_>) -> PyResult<()> {
    py.import("loaderx.errors").map(drop)
}

/// A file's name for Python: a `str` for the URL of an object in a remote store
/// (a `pathlib.Path` would fold its `//`), else a `pathlib.Path`.
fn named(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyAny>> {
    match path.to_str() {
        Some(s) if loaderx_remote::is_url(s) => Ok(s.into_pyobject(py)?.into_any()),
        _ => Ok(path.into_pyobject(py)?.into_any()),
    }
}

/// An instance of `class` made from `args`, with `attrs` set on it; a failure
/// to make it is raised in its place.
fn made<'py>(
    class: &Bound<'py, pyo3::types::PyType>,
    args: PyResult<Bound<'py, PyTuple>>,
    attrs: &[(&str, Bound<'py, PyAny>)],
) -> PyErr {
    let value = (|| {
        let v = class.call1(args?)?;
        for (k, a) in attrs {
            v.setattr(*k, a)?;
        }
        Ok::<_, PyErr>(v)
    })();
    match value {
        Ok(v) => PyErr::from_value(v),
        Err(e) => e,
    }
}

/// An `OSError` subclass `T` with `errno`, message and `filename` set, as
/// Python's own `OSError(errno, strerror, filename)` would have them.
fn os_error<T: PyTypeInfo>(errno: i32, msg: String, path: PathBuf) -> PyErr {
    Python::attach(|py| {
        let args = named(py, path).and_then(|p| (errno, msg, p).into_pyobject(py));
        made(&T::type_object(py), args, &[])
    })
}

fn io_error(source: &std::io::Error, msg: String, path: PathBuf) -> PyErr {
    let errno = source.raw_os_error().unwrap_or(0);
    match source.kind() {
        std::io::ErrorKind::NotFound => os_error::<StoreNotFoundError>(errno, msg, path),
        _ => os_error::<StorageError>(errno, msg, path),
    }
}

fn format_error(e: zrecord::Error) -> PyErr {
    use zrecord::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidArgument(_) => InvalidArgumentError::new_err(msg),
        E::OutOfRange { .. } => OutOfRangeError::new_err(msg),
        E::NotFound(_) => StoreNotFoundError::new_err(msg),
        E::Exists(_) => StoreExistsError::new_err(msg),
        E::Io { path, source } => io_error(&source, msg, path),
        E::PublishedNotDurable { path, source, .. } => {
            os_error::<PublishedNotDurableError>(source.raw_os_error().unwrap_or(0), msg, path)
        }
        E::Corrupt { path, record, .. } => Python::attach(|py| {
            let attrs = named(py, path).and_then(|p| {
                Ok([
                    ("path", p),
                    ("record", record.into_pyobject(py)?.into_any()),
                ])
            });
            match attrs {
                Ok(attrs) => made(
                    &ZrecordError::type_object(py),
                    PyTuple::new(py, [msg]),
                    &attrs,
                ),
                Err(e) => e,
            }
        }),
        E::OutOfMemory { .. } => OutOfMemoryError::new_err(msg),
        E::Internal(_) => InternalError::new_err(msg),
    }
}

fn engine_error(e: loaderx_gather::Error) -> PyErr {
    use loaderx_gather::Error as E;
    let msg = e.to_string();
    match e {
        E::Store(e) => format_error(e),
        E::Device(_) => DeviceError::new_err(msg),
        E::NotFound { url, .. } => os_error::<StoreNotFoundError>(libc::ENOENT, msg, url.into()),
        E::Exists(url) => os_error::<StoreExistsError>(libc::EEXIST, msg, url.into()),
        E::Storage { url, .. } => os_error::<StorageError>(libc::EIO, msg, url.into()),
    }
}

/// Converts a crate's result into a Python one.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for zrecord::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(format_error)
    }
}

impl<T> IntoPy<T> for loaderx_gather::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(engine_error)
    }
}

impl<T> IntoPy<T> for loaderx_sampler::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(|e| InvalidArgumentError::new_err(e.0))
    }
}

/// An argument's value breaks the contract (`InvalidArgumentError`, a
/// `ValueError`).
pub fn invalid_argument(msg: impl Into<String>) -> PyErr {
    InvalidArgumentError::new_err(msg.into())
}

/// A position outside `0..len` (`OutOfRangeError`, an `IndexError`).
pub fn out_of_range(msg: impl Into<String>) -> PyErr {
    OutOfRangeError::new_err(msg.into())
}

/// A buffer of this many bytes could not be had (`OutOfMemoryError`, a
/// `MemoryError`).
pub fn out_of_memory(msg: impl Into<String>) -> PyErr {
    OutOfMemoryError::new_err(msg.into())
}

/// An argument of the wrong type: a plain `TypeError`, as the package raises
/// for type mistakes.
pub fn wrong_type(msg: impl Into<String>) -> PyErr {
    pyo3::exceptions::PyTypeError::new_err(msg.into())
}

/// A DLPack exchange the other side got wrong (a tensor this module cannot
/// take, or a capsule already used): the `BufferError` DLPack prescribes.
pub fn bad_buffer(msg: impl Into<String>) -> PyErr {
    pyo3::exceptions::PyBufferError::new_err(msg.into())
}

/// A counter that has run out of values (`OverflowError`).
pub fn overflow(msg: impl Into<String>) -> PyErr {
    pyo3::exceptions::PyOverflowError::new_err(msg.into())
}

/// Whether `e` is a `TypeError`: how NumPy refuses a dtype name it does not
/// know, and how an older producer refuses DLPack keywords.
pub fn is_type_error(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<pyo3::exceptions::PyTypeError>(py)
}

/// `MissingDependencyError` (an `ImportError`) for the optional package
/// `module`, with `msg` saying what needs it and how to install it, when the
/// import that failed with `e` failed because it is not installed; any other
/// failure is `e` itself.
pub fn missing_dependency(py: Python<'_>, e: PyErr, module: &'static str, msg: String) -> PyErr {
    if !e.is_instance_of::<pyo3::exceptions::PyImportError>(py) {
        return e;
    }
    let name = module.into_pyobject(py).map(|n| n.into_any());
    let Ok(name) = name;
    made(
        &MissingDependencyError::type_object(py),
        PyTuple::new(py, [msg]),
        &[("name", name)],
    )
}
