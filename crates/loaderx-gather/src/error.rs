//! The engine's errors: the format's, what only allocating on devices can cause,
//! and what a store read from elsewhere (object storage) can fail with, so that
//! every [`crate::RecordSource`] fails with one type.

use std::path::PathBuf;

/// Everything reading records or allocating for them can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A failure of the store itself, of a local file, or of the caller's
    /// arguments.
    #[error(transparent)]
    Store(#[from] zrecord::Error),
    /// A GPU runtime could not be loaded, or one of its calls failed.
    #[error("{0}")]
    Device(String),
    /// Nothing at `url`: the object a store needs first does not exist.
    #[error("{url}: no such store ({what} does not exist)")]
    NotFound {
        /// The store that was looked for.
        url: String,
        /// The object that does not exist.
        what: String,
    },
    /// A store already exists where an upload was to go.
    #[error("{0}: already exists; pass overwrite to replace it")]
    Exists(String),
    /// Object storage failed: a request failed for good, or still failed after
    /// the configured retries.
    #[error("{url}: {msg}")]
    Storage {
        /// The object the request was for.
        url: String,
        /// What failed, and how often it was tried.
        msg: String,
    },
}

/// What every fallible function of this crate returns.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A caller's mistake, in the format's own variant so that it maps to the
    /// same exception everywhere.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Store(zrecord::Error::InvalidArgument(msg.into()))
    }

    /// An operating-system failure on a local file or directory.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Store(zrecord::Error::Io {
            path: path.into(),
            source,
        })
    }

    /// A bug: an invariant of loaderx did not hold.
    pub fn internal(msg: impl Into<String>) -> Self {
        Error::Store(zrecord::Error::Internal(msg.into()))
    }

    /// The format error this is, if it is one.
    pub fn format(&self) -> Option<&zrecord::Error> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}
