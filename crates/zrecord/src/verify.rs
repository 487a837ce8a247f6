//! Verifying records: every record's stored bytes against their checksum, and
//! that it decodes to its logical size. Decoding scratch is sized from what a
//! frame can really hold (the plan's checks), so a store whose schema claims
//! huge records cannot make a verify allocate them.

use std::ops::Range;

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};
use crate::meta::Metadata;
use crate::parallel::{run_parts, Parallel};
use crate::source::{IndexSource, PayloadSource};

/// About how many stored bytes one step of a verify in steps covers: what a
/// caller that reports progress verifies between two reports, and what a
/// remote verify fetches and holds at once.
pub const VERIFY_STEP_BYTES: u64 = 64 << 20;

impl<I: IndexSource> Metadata<I> {
    /// Checks each record in `range` whose stored bytes `src` holds: its entry,
    /// its stored bytes against their checksum, and that it decodes to its
    /// logical size. The first damaged record is reported with its file. With
    /// [`Metadata::check_index`] and the data files' sizes, run over every
    /// range, this is a whole verify; a caller can verify a large store in steps
    /// and report progress.
    pub fn verify_records<S: PayloadSource + ?Sized>(
        &self,
        range: Range<u64>,
        par: &dyn Parallel,
        src: &S,
    ) -> Result<()> {
        self.check_range(&range)?;
        let n = range.end - range.start;
        let parts = par.parts(usize::MAX, true).max(1) as u64;
        let per = n.div_ceil(parts).max(1);
        let ranges: Vec<_> = (0..parts)
            .map(|k| range.start + (k * per).min(n)..range.start + ((k + 1) * per).min(n))
            .filter(|r| !r.is_empty())
            .collect();
        run_parts(par, ranges, |range| self.verify_in(range, src))
    }

    fn verify_in<S: PayloadSource + ?Sized>(&self, range: Range<u64>, src: &S) -> Result<()> {
        let mut session = self.core().decoder.session();
        let mut scratch: Vec<u8> = Vec::new();
        for i in range {
            let (e, logical) = self.checked_entry(i)?;
            if xxh3_64(self.stored(src, &e)?) != e.checksum {
                return Err(self.checksum_error(&e, i));
            }
            self.check_declared_size(src, &e, i, logical)?;
            let logical = logical as usize;
            if scratch.len() < logical {
                scratch
                    .try_reserve(logical - scratch.len())
                    .map_err(|_| Error::OutOfMemory { bytes: logical })?;
                scratch.resize(logical, 0);
            }
            self.decode_entry(&mut session, src, i, &e, &mut scratch[..logical])?;
        }
        Ok(())
    }
}
