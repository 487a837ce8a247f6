//! What the index alone says about a store's records, without reading a byte
//! of their data: each record's logical and stored size.

use std::ops::Range;

use crate::error::Result;
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
}
