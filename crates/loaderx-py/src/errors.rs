//! The one place where errors become Python exceptions. The classes live in the
//! pure-Python `loaderx.errors`, where users read them; each subclasses the
//! standard exception its failure has always raised, so `except ValueError`
//! and the like keep working.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// The exception class `name` of `loaderx.errors`.
fn class<'py>(py: Python<'py>, name: &'static str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("loaderx.errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// Builds exception `name` with `args`, then sets `attrs` on it.
fn raise(
    name: &'static str,
    args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>>,
    attrs: impl for<'py> FnOnce(&Bound<'py, PyAny>) -> PyResult<()>,
) -> PyErr {
    Python::attach(|py| {
        let made = (|| {
            let value = class(py, name)?.call1(args(py)?)?;
            attrs(&value)?;
            Ok::<_, PyErr>(PyErr::from_value(value))
        })();
        made.unwrap_or_else(|e| e)
    })
}

fn simple(name: &'static str, msg: String) -> PyErr {
    raise(name, |py| pyo3::types::PyTuple::new(py, [msg]), |_| Ok(()))
}

/// An `OSError` subclass with `errno`, message and `filename` set, as Python's
/// own `OSError(errno, strerror, filename)` would have them.
fn os_error(name: &'static str, source: &std::io::Error, msg: String, path: PathBuf) -> PyErr {
    let errno = source.raw_os_error().unwrap_or(0);
    raise(
        name,
        move |py| (errno, msg, named(py, path)?).into_pyobject(py),
        |_| Ok(()),
    )
}

/// A file's name for Python: a `str` for the URL of an object in a remote store
/// (a `pathlib.Path` would fold its `//`), else a `pathlib.Path`.
fn named(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyAny>> {
    match path.to_str() {
        Some(s) if loaderx_remote::is_url(s) => Ok(s.into_pyobject(py)?.into_any()),
        _ => Ok(path.into_pyobject(py)?.into_any()),
    }
}

fn format_error(e: zrecord::Error) -> PyErr {
    use zrecord::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidArgument(_) => simple("InvalidArgumentError", msg),
        E::OutOfRange { .. } => simple("OutOfRangeError", msg),
        E::NotFound(_) => simple("StoreNotFoundError", msg),
        E::Exists(_) => simple("StoreExistsError", msg),
        E::Io { path, source } => match source.kind() {
            std::io::ErrorKind::NotFound => os_error("StoreNotFoundError", &source, msg, path),
            _ => os_error("StorageError", &source, msg, path),
        },
        E::PublishedNotDurable { path, source, .. } => {
            os_error("PublishedNotDurableError", &source, msg, path)
        }
        E::Corrupt { path, record, .. } => raise(
            "ZrecordError",
            |py| pyo3::types::PyTuple::new(py, [msg]),
            |v| {
                v.setattr("path", named(v.py(), path)?)?;
                v.setattr("record", record)
            },
        ),
        E::OutOfMemory { .. } => simple("OutOfMemoryError", msg),
        E::Internal(_) => simple("InternalError", msg),
    }
}

/// `InvalidArgumentError` (a `ValueError`) with `msg`.
pub fn invalid_argument(msg: String) -> PyErr {
    simple("InvalidArgumentError", msg)
}

/// `OutOfRangeError` with `msg`.
pub fn out_of_range(msg: String) -> PyErr {
    simple("OutOfRangeError", msg)
}

/// `MissingDependencyError` (an `ImportError`) for the optional package
/// `module`, with `msg` saying what needs it and how to install it.
pub fn missing_dependency(module: &'static str, msg: String) -> PyErr {
    raise(
        "MissingDependencyError",
        |py| pyo3::types::PyTuple::new(py, [msg]),
        |v| v.setattr("name", module),
    )
}

fn engine_error(e: loaderx_gather::Error) -> PyErr {
    match e {
        loaderx_gather::Error::Store(e) => format_error(e),
        loaderx_gather::Error::Device(msg) => simple("DeviceError", msg),
    }
}

fn remote_error(e: loaderx_remote::Error) -> PyErr {
    use loaderx_remote::Error as E;
    let msg = e.to_string();
    match e {
        E::Engine(e) => engine_error(e),
        E::InvalidArgument(_) => simple("InvalidArgumentError", msg),
        E::NotFound { url, .. } => os_error(
            "StoreNotFoundError",
            &std::io::Error::from_raw_os_error(libc::ENOENT),
            msg,
            url.into(),
        ),
        E::Exists(url) => os_error(
            "StoreExistsError",
            &std::io::Error::from_raw_os_error(libc::EEXIST),
            msg,
            url.into(),
        ),
        E::Storage { url, .. } => os_error(
            "StorageError",
            &std::io::Error::from_raw_os_error(libc::EIO),
            msg,
            url.into(),
        ),
        E::Io { path, source } => match source.kind() {
            std::io::ErrorKind::NotFound => os_error("StoreNotFoundError", &source, msg, path),
            _ => os_error("StorageError", &source, msg, path),
        },
    }
}

/// Converts a core result into a Python one.
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

impl<T> IntoPy<T> for loaderx_remote::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(remote_error)
    }
}

impl<T> IntoPy<T> for loaderx_sampler::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(|e| simple("InvalidArgumentError", e.0))
    }
}
