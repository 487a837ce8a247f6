//! The engine's errors: the format's, plus what only placement on devices can
//! cause.

/// Everything a gather, placement or allocation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A failure of the store itself, or of the caller's arguments to it.
    #[error(transparent)]
    Store(#[from] zrecord::Error),
    /// A GPU runtime could not be loaded, or one of its calls failed.
    #[error("{0}")]
    Device(String),
}

/// What every fallible function of this crate returns.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A caller's mistake, in the format's own variant so that it maps to the
    /// same exception everywhere.
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::Store(zrecord::Error::InvalidArgument(msg.into()))
    }
}
