//! The errors of remote reads: the engine's and format's, plus what only a
//! network (or a cache directory) can cause.

use std::path::PathBuf;

/// Everything opening, reading, verifying or uploading a remote store can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A failure of the store itself, of the gather engine, or of the caller's
    /// arguments to them.
    #[error(transparent)]
    Engine(#[from] loaderx_gather::Error),
    /// A URL or option the caller passed is not valid.
    #[error("{0}")]
    InvalidArgument(String),
    /// Nothing at `url`: the object a store needs first does not exist.
    #[error("{url}: no such store ({what} does not exist)")]
    NotFound {
        /// The object that was looked for.
        url: String,
        /// What it is.
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
    /// A local file (the cache directory, a store being uploaded) could not be
    /// used.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
}

impl From<zrecord::Error> for Error {
    fn from(e: zrecord::Error) -> Self {
        Error::Engine(loaderx_gather::Error::Store(e))
    }
}

impl Error {
    /// The format error this is, if it is one.
    pub(crate) fn format(&self) -> Option<&zrecord::Error> {
        match self {
            Error::Engine(loaderx_gather::Error::Store(e)) => Some(e),
            _ => None,
        }
    }
}

/// What every fallible function of this crate returns.
pub type Result<T> = std::result::Result<T, Error>;
