//! What the index alone says about a store's records, without reading a byte
//! of their data: each record's logical and stored size, and a Ragged record's
//! length along its first axis.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::format::{le_u64, Kind};
use crate::meta::Metadata;
use crate::source::IndexSource;

/// Records whose sizes a caller reads per call when it reads a whole store's:
/// two arrays of 8 MiB each, whatever the store's size.
pub const SIZES_STEP_RECORDS: u64 = 1 << 20;

impl<I: IndexSource> Metadata<I> {
    /// Calls `each(logical, stored)` with the logical and stored byte counts of
    /// every record in `range`, in position order. Each entry is checked as a
    /// gather checks it, so a damaged index is an error naming the record rather
    /// than a wrong size.
    pub fn record_sizes(&self, range: Range<u64>, mut each: impl FnMut(u64, u64)) -> Result<()> {
        self.check_range(&range)?;
        for i in range {
            let (e, logical) = self.checked_entry(i)?;
            each(logical, u64::from(e.stored_len));
        }
        Ok(())
    }

    /// Calls `each(length)` with the length along axis 0 of every record in
    /// `range` of a Ragged store, in position order: the first dimension of the
    /// shape its index entry holds. Each entry is checked as a gather checks it;
    /// a Dense store is an [`Error::InvalidArgument`] (its records share one
    /// shape, given by the schema).
    pub fn record_lengths(&self, range: Range<u64>, mut each: impl FnMut(u64)) -> Result<()> {
        if self.schema().kind != Kind::Ragged {
            return Err(Error::InvalidArgument(
                "record lengths are read from a Ragged store's index; a Dense store's \
                 records all have the schema's item shape"
                    .into(),
            ));
        }
        self.check_range(&range)?;
        for i in range {
            let (_, shape) = self.entry_and_shape(i)?;
            // A Ragged schema has ndim >= 1, so the entry holds at least one dimension.
            let first = shape
                .get(..8)
                .ok_or_else(|| Error::Internal(format!("index entry {i} holds no shape")))?;
            each(le_u64(first, 0));
        }
        Ok(())
    }
}
