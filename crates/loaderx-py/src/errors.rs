//! The one place where core errors become Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyIndexError, PyOSError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;

create_exception!(
    _native,
    ZrecordError,
    PyValueError,
    "A store on disk is damaged, incomplete, or of a format this version does not read."
);

pub fn to_py(e: zrecord::Error) -> PyErr {
    use zrecord::Error as E;
    let msg = e.to_string();
    match e {
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(msg)
        }
        E::Io { .. } => PyOSError::new_err(msg),
        E::Corrupt { .. } => ZrecordError::new_err(msg),
        E::Invalid(_) => PyValueError::new_err(msg),
        E::OutOfRange { .. } => PyIndexError::new_err(msg),
        E::NotFound(_) => PyFileNotFoundError::new_err(msg),
        E::Exists(_) => PyFileExistsError::new_err(msg),
        E::Runtime(_) => PyRuntimeError::new_err(msg),
    }
}

pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for zrecord::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
