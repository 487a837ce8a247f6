//! The two seams between the format and wherever a store's bytes are: a read
//! asks a [`PayloadSource`] for the stored bytes of its records and an
//! [`IndexSource`] for the bytes of `index.bin`. The reader checks everything it
//! is handed, whatever the source, so a source only has to find bytes.
//!
//! Every read is generic over its sources, so the calls below are resolved once
//! per gather, not looked up per record.

use std::ops::Range;

use crate::error::{Error, Result};

/// Bytes of a record's head [`PayloadSource::prefetch`] asks for; the hardware
/// prefetcher streams the rest of a longer record once its first lines arrive.
const PREFETCH_HEAD_BYTES: u64 = 256;

/// Where a read finds the stored bytes of records: a store's data files, mapped
/// from local files or fetched from object storage for one gather.
pub trait PayloadSource: Sync {
    /// Bytes `range` of data file `file`, borrowed; `None` when this source does
    /// not hold them (a fetched source holds only what its gather asked for).
    fn bytes(&self, file: usize, range: Range<u64>) -> Option<&[u8]>;

    /// Whether a record whose stored bytes are its `len` logical bytes is better
    /// read straight into its output with [`PayloadSource::read_into`] than
    /// copied from [`PayloadSource::bytes`].
    #[inline]
    fn reads_into(&self, _len: usize) -> bool {
        false
    }

    /// Fills `dst` with the bytes of data file `file` from `offset`. Asked only
    /// where [`PayloadSource::reads_into`] says so; by default a copy of
    /// [`PayloadSource::bytes`].
    fn read_into(&self, file: usize, offset: u64, dst: &mut [u8]) -> Result<()> {
        let range = offset..offset.saturating_add(dst.len() as u64);
        let src = self
            .bytes(file, range)
            .ok_or_else(|| not_held(file, offset))?;
        if src.len() != dst.len() {
            return Err(Error::Internal(format!(
                "{} bytes handed in for a read of {}",
                src.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(src);
        Ok(())
    }

    /// A hint that [`PayloadSource::bytes`] will soon be asked for `range` of
    /// data file `file`. It must never fault, whatever the range. By default the
    /// first few cache lines are asked of the CPU: a record's head is a
    /// cache miss the copies of the records before it can hide.
    #[inline]
    fn prefetch(&self, file: usize, range: Range<u64>) {
        let end = range
            .end
            .min(range.start.saturating_add(PREFETCH_HEAD_BYTES));
        if let Some(head) = self.bytes(file, range.start..end) {
            prefetch_head(head);
        }
    }

    /// Whether the `len` stored bytes of record `pos` this source gives have
    /// matched the record's checksum before ([`PayloadSource::passed_check`])
    /// and cannot have changed since, so that a checked read need not hash
    /// them again: only a source whose bytes are its own immutable memory can
    /// say so. `false` by default.
    #[inline]
    fn checked_before(&self, _pos: u64, _len: usize) -> bool {
        false
    }

    /// Notes that the `len` stored bytes of record `pos` this source gave
    /// matched the record's checksum.
    #[inline]
    fn passed_check(&self, _pos: u64, _len: usize) {}
}

/// Asks the CPU for the lines of a record's stored bytes `record` that
/// [`PayloadSource::prefetch`] asks for: those of its first
/// `PREFETCH_HEAD_BYTES`. For a source that finds its records' bytes before
/// the gather copies them, and prefetches them then.
#[inline]
pub fn prefetch_head(record: &[u8]) {
    let head = &record[..record.len().min(PREFETCH_HEAD_BYTES as usize)];
    for line in (0..head.len()).step_by(64) {
        prefetch(head[line..].as_ptr());
    }
}

/// Where a read finds the bytes of a store's index (`index.bin`): a mapped
/// local file, or bytes a caller read. The reader asks for one entry's bytes at
/// a time, for one block of [`crate::INDEX_BLOCK_BYTES`] (to check it against
/// `index.sum` the first time an entry in it is used) and, for an index small
/// enough to check whole at open, for all of it.
pub trait IndexSource: Send + Sync {
    /// Bytes of the index this source holds; opening checks it against the
    /// header's index size.
    fn len(&self) -> u64;

    /// Whether the index is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `range` of the index, borrowed; `None` when this source does not
    /// hold them.
    fn bytes(&self, range: Range<usize>) -> Option<&[u8]>;
}

/// An index a caller read whole (from object storage, say).
impl IndexSource for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    #[inline]
    fn bytes(&self, range: Range<usize>) -> Option<&[u8]> {
        self.get(range)
    }
}

/// A hint to move the cache line holding `p` towards the core. It never faults,
/// so any address is allowed.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86_64 baseline; a prefetch has no side effects.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The error for stored bytes a source does not hold: the caller fetched less
/// than the entries it was given say, a bug rather than damage.
#[cold]
pub(crate) fn not_held(file: usize, offset: u64) -> Error {
    Error::Internal(format!(
        "the stored bytes at offset {offset} of data file {file} were not fetched"
    ))
}
