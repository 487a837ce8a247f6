//! Decoding a plan into a caller's buffer: the output is cut into parts of
//! roughly equal bytes, and each part decodes (or copies) its records from the
//! payload source straight into their slots, on whatever threads the caller's
//! [`Parallel`] runs it.

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::DecodeSession;
use crate::error::{Error, Result};
use crate::format::{Entry, ENTRY_FIXED};
use crate::meta::{Metadata, PREFETCH_AHEAD};
use crate::parallel::{run_parts, Parallel};
use crate::plan::Plan;
use crate::source::{IndexSource, PayloadSource};

impl<I: IndexSource> Metadata<I> {
    /// Fills `out` (exactly [`Plan::output_len`] bytes) with the planned records,
    /// their stored bytes from `src`: Dense records end to end; Ragged values,
    /// `cu_seqlens` and shapes as the plan's layout says.
    pub fn gather<S: PayloadSource + ?Sized>(
        &self,
        plan: &Plan<'_>,
        out: &mut [u8],
        par: &dyn Parallel,
        src: &S,
    ) -> Result<()> {
        if out.len() != plan.output_len {
            return Err(Error::InvalidArgument(format!(
                "output holds {} bytes, the gather needs {}",
                out.len(),
                plan.output_len
            )));
        }
        match &plan.layout {
            None => self.fill_parts(plan, out, par, src),
            Some(layout) => {
                let (values, meta) = out.split_at_mut(layout.cu_offset);
                let (cu, shapes) = meta.split_at_mut(layout.shapes_offset - layout.cu_offset);
                let isz = self.schema().dtype.itemsize();
                let shape_bytes = 8 * layout.ndim;
                let mut acc: usize = 0;
                cu[..4].copy_from_slice(&0i32.to_le_bytes());
                for (k, &p) in plan.ids.iter().enumerate() {
                    // The layout checked that every prefix sum fits in an i32.
                    acc += plan.sizes[k] / isz;
                    cu[4 * (k + 1)..4 * (k + 2)].copy_from_slice(&(acc as i32).to_le_bytes());
                    if plan.shapes.is_empty() {
                        let raw = self.entry_bytes(p)?;
                        shapes[k * shape_bytes..(k + 1) * shape_bytes]
                            .copy_from_slice(&raw[ENTRY_FIXED..ENTRY_FIXED + shape_bytes]);
                    }
                }
                if !plan.shapes.is_empty() {
                    shapes[..plan.shapes.len()].copy_from_slice(&plan.shapes);
                }
                let values = &mut values[..layout.values_bytes];
                self.fill_parts(plan, values, par, src)
            }
        }
    }

    /// Decodes the planned records into `out` (their logical bytes end to end),
    /// split into parts of roughly equal bytes run through `par`.
    fn fill_parts<S: PayloadSource + ?Sized>(
        &self,
        plan: &Plan<'_>,
        out: &mut [u8],
        par: &dyn Parallel,
        src: &S,
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let parts = par.parts(out.len(), !self.core().raw).max(1);
        let target = out.len().div_ceil(parts).max(1);
        let mut tasks = Vec::with_capacity(parts);
        let mut rest = out;
        let n = plan.ids.len();
        let mut start = 0;
        while start < n {
            let (mut end, mut bytes) = (start, 0);
            while end < n && (end == start || bytes < target) {
                bytes += plan.size(end);
                end += 1;
            }
            let (dst, tail) = std::mem::take(&mut rest).split_at_mut(bytes);
            rest = tail;
            tasks.push((start..end, dst));
            start = end;
        }
        run_parts(par, tasks, |(range, dst)| {
            let resolved;
            let entries = if plan.entries.is_empty() {
                resolved = self.resolve(&plan.ids[range.clone()])?;
                &resolved[..]
            } else {
                &plan.entries[range.clone()]
            };
            if let Some(rb) = plan
                .uniform
                .filter(|&rb| rb > 0 && self.core().raw && !src.reads_into(rb))
            {
                return self.copy_raw(&plan.ids[range], entries, rb, dst, src);
            }
            let mut rest = dst;
            let mut session = self.core().decoder.session();
            for (j, k) in range.enumerate() {
                if let Some(e) = entries.get(j + PREFETCH_AHEAD) {
                    let len = e.stored_len as usize;
                    if !self.reads_into(src, len) {
                        src.prefetch(e.file as usize, e.offset..e.offset + len as u64);
                    }
                }
                let (slot, tail) = std::mem::take(&mut rest).split_at_mut(plan.size(k));
                rest = tail;
                self.decode_entry(&mut session, src, plan.ids[k], &entries[j], slot)?;
            }
            Ok(())
        })
    }

    /// Copies raw records of `rb` stored bytes each, whose checked entries are
    /// `entries` (of the records at `ids`), from `src` end to end into `dst`:
    /// the loop of [`Metadata::decode_entry`] without its decoder and its
    /// per-record sizes, which a gather of tiny records pays for as much as
    /// for the copies themselves.
    fn copy_raw<S: PayloadSource + ?Sized>(
        &self,
        ids: &[u64],
        entries: &[Entry],
        rb: usize,
        dst: &mut [u8],
        src: &S,
    ) -> Result<()> {
        for (j, (slot, e)) in dst.chunks_exact_mut(rb).zip(entries).enumerate() {
            if let Some(a) = entries.get(j + PREFETCH_AHEAD) {
                src.prefetch(a.file as usize, a.offset..a.offset + rb as u64);
            }
            let stored = self.stored(src, e)?;
            self.check_stored(src, e, ids[j], stored)?;
            slot.copy_from_slice(stored);
        }
        Ok(())
    }

    /// Whether a record of `len` stored bytes goes straight from `src` into its
    /// output: raw records, where the source prefers it.
    #[inline]
    fn reads_into<S: PayloadSource + ?Sized>(&self, src: &S, len: usize) -> bool {
        self.core().raw && src.reads_into(len)
    }

    /// Decodes the checked entry `e` of record `pos` from `src` into `dst`, its
    /// logical size, checking its stored bytes first when the store reads
    /// checked.
    pub(crate) fn decode_entry<S: PayloadSource + ?Sized>(
        &self,
        session: &mut DecodeSession<'_>,
        src: &S,
        pos: u64,
        e: &Entry,
        dst: &mut [u8],
    ) -> Result<()> {
        if self.reads_into(src, dst.len()) {
            src.read_into(e.file as usize, e.offset, dst)?;
            return self.check_stored(src, e, pos, dst);
        }
        let stored = self.stored(src, e)?;
        self.check_stored(src, e, pos, stored)?;
        session
            .decode(stored, dst)
            .map_err(|msg| self.payload_error(e, pos, msg))
    }

    /// The stored bytes of record `pos` (entry `e`), as `src` gave them,
    /// against its checksum, when the store reads checked and `src` has not
    /// seen these very bytes pass before.
    #[inline]
    fn check_stored<S: PayloadSource + ?Sized>(
        &self,
        src: &S,
        e: &Entry,
        pos: u64,
        stored: &[u8],
    ) -> Result<()> {
        if !self.info().options().checked || src.checked_before(pos, stored.len()) {
            return Ok(());
        }
        if xxh3_64(stored) != e.checksum {
            return Err(self.checksum_error(e, pos));
        }
        src.passed_check(pos, stored.len());
        Ok(())
    }

    #[cold]
    pub(crate) fn payload_error(&self, e: &Entry, pos: u64, msg: impl Into<String>) -> Error {
        Error::corrupt_record(self.data_path(e.file as usize), pos, msg)
    }

    #[cold]
    pub(crate) fn checksum_error(&self, e: &Entry, pos: u64) -> Error {
        self.payload_error(e, pos, "checksum mismatch (the payload is damaged)")
    }
}
