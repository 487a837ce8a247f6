//! One error type for the format. Each variant says what kind of failure it is,
//! not where it happened, so that the Python bindings can map every variant to
//! exactly one exception class.

use std::path::{Path, PathBuf};

/// Everything that can go wrong reading or writing a store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller passed a value the contract does not allow.
    #[error("{0}")]
    InvalidArgument(String),
    /// A record position outside `0..len`.
    #[error("{}", out_of_range_message(index, *len))]
    OutOfRange {
        /// The position asked for (wide enough for any caller's integer).
        index: i128,
        /// The store's record count.
        len: u64,
    },
    /// No store at this path.
    #[error("{0}: no such store")]
    NotFound(PathBuf),
    /// A store (or anything else) already exists where one is to be created.
    #[error("{0}: already exists; stores are immutable, write a new path")]
    Exists(PathBuf),
    /// An operating-system failure on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A store was published (renamed into place, complete and readable), but
    /// syncing the directory that holds it failed, so a crash may still undo the
    /// rename. Publishing must not be retried: the store is there.
    #[error(
        "the store was published at {path}, but its directory entry may not be durable: \
         syncing {parent} failed: {source}"
    )]
    PublishedNotDurable {
        /// Where the store now is.
        path: PathBuf,
        /// The directory whose sync failed.
        parent: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The store on disk is damaged or was written by something this crate does
    /// not read.
    #[error("{path}: {}{msg}", record.map(|r| format!("record {r}: ")).unwrap_or_default())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// The record whose bytes or index entry are damaged, when one is.
        record: Option<u64>,
        /// What is wrong.
        msg: String,
    },
    /// An allocation of this many bytes failed.
    #[error("out of memory allocating {bytes} bytes")]
    OutOfMemory {
        /// The size asked for.
        bytes: usize,
    },
    /// A bug: an invariant of this library did not hold (a worker panicked, a
    /// codec failed on valid input).
    #[error("internal error: {0}")]
    Internal(String),
}

/// The message of a position outside `0..len`, for callers that find one before
/// this crate does (positions too large for any integer type here).
pub fn out_of_range_message(index: impl std::fmt::Display, len: u64) -> String {
    match len {
        0 => format!("position {index} is out of range: the store holds no records"),
        n => format!(
            "position {index} is out of range for a store of {n} records (0..{})",
            n - 1
        ),
    }
}

/// What every fallible function of this crate returns.
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
            record: None,
            msg: msg.into(),
        }
    }

    pub(crate) fn corrupt_record(path: &Path, record: u64, msg: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.to_path_buf(),
            record: Some(record),
            msg: msg.into(),
        }
    }
}

/// Attaches a path to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
