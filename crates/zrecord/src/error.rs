//! One error type for the whole core. The bindings map each variant to exactly one
//! Python exception class, so the variant is chosen by what the caller did wrong,
//! not by where the failure happened.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system failure on a named file.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The store on disk is damaged or was written by something we do not read.
    #[error("{path}: {msg}")]
    Corrupt { path: PathBuf, msg: String },
    /// The caller passed a value the contract does not allow.
    #[error("{0}")]
    Invalid(String),
    /// A record position outside `0..len`.
    #[error("position {index} is out of range for a store of {len} records")]
    OutOfRange { index: i128, len: u64 },
    #[error("{0}: no such store")]
    NotFound(PathBuf),
    #[error("{0}: already exists; stores are immutable, write a new path")]
    Exists(PathBuf),
    /// A GPU runtime could not be loaded, or one of its calls failed.
    #[error("{0}")]
    Runtime(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            msg: msg.into(),
        }
    }
}

/// Attaches a path to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
