//! Planning a gather: positions to checked entries to the output they need.
//! Every record whose size the output depends on is resolved and checked here,
//! before the caller allocates anything, so that damaged data can never make a
//! gather set aside memory its data does not hold.

use std::sync::Mutex;

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::declared_size;
use crate::error::{Error, Result};
use crate::format::{Entry, Kind};
use crate::meta::{Metadata, PREFETCH_AHEAD};
use crate::parallel::{run_parts, Parallel};
use crate::ragged::RaggedLayout;
use crate::source::{not_held, IndexSource, PayloadSource};

/// The records of one gather, resolved and checked, with the output they need.
/// Made by [`Metadata::plan`]; the output is allocated from
/// [`Plan::output_len`] only after every record was found sound.
pub struct Plan<'a> {
    pub(crate) ids: &'a [u64],
    /// Resolved entries; empty for raw Dense planned from positions, whose
    /// parts resolve and check their own entries while they copy, on every
    /// thread.
    pub(crate) entries: Vec<Entry>,
    /// The one logical size of every record of a raw Dense plan.
    pub(crate) uniform: Option<usize>,
    /// Logical bytes of each record.
    pub(crate) sizes: Vec<usize>,
    pub(crate) layout: Option<RaggedLayout>,
    pub(crate) output_len: usize,
    /// Each record's shape as its index entry stores it, end to end, where
    /// the plan was made from [`Resolved`] records of a Ragged store; empty
    /// otherwise, and the gather reads the shapes from the index.
    pub(crate) shapes: Vec<u8>,
}

/// Records resolved from the index before a gather ([`Metadata::held_entries`]):
/// their checked entries, and their sizes, so that a plan made from both
/// ([`Metadata::plan_resolved`]) reads nothing of the index again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The checked entries, in the order of the positions.
    pub entries: Vec<Entry>,
    /// Their sizes, for [`Metadata::plan_resolved`].
    pub sizes: Sizes,
}

/// The logical size of each of a gather's records and, for a Ragged store,
/// its shape as its index entry stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes {
    logicals: Vec<u64>,
    shapes: Vec<u8>,
}

impl Sizes {
    pub(crate) fn new(logicals: Vec<u64>, shapes: Vec<u8>) -> Sizes {
        Sizes { logicals, shapes }
    }
}

impl Plan<'_> {
    /// Logical bytes of planned record `k`.
    #[inline]
    pub(crate) fn size(&self, k: usize) -> usize {
        self.uniform.unwrap_or_else(|| self.sizes[k])
    }

    /// Bytes of output the gather fills.
    pub fn output_len(&self) -> usize {
        self.output_len
    }

    /// Where a Ragged gather puts values, `cu_seqlens` and shapes; `None` for Dense.
    pub fn layout(&self) -> Option<&RaggedLayout> {
        self.layout.as_ref()
    }
}

/// Fewest records a part of a plan's checks must have before the checks are split
/// across threads: each costs about one cache miss, against a hand-off's wake-up.
const MIN_CHECKS_PER_PART: usize = 32;

/// What one part of a plan's checks found: the checked entries of its records
/// and their logical sizes.
type CheckedPart = Result<(Vec<Entry>, Vec<u64>)>;

pub(crate) fn too_large(records: usize) -> Error {
    Error::InvalidArgument(format!(
        "{records} records hold more bytes than this machine can address; gather fewer at once"
    ))
}

impl<I: IndexSource> Metadata<I> {
    /// Resolves and checks the records at `idx` and computes the output they
    /// need; `src` holds their stored bytes. A compressed record must declare
    /// exactly its logical size in its frame header, so a damaged frame is
    /// refused before any output is allocated. The checks run in parts through
    /// `par`: reading a frame header is a cache miss per record, which one thread
    /// would take one after another before any thread starts decoding.
    pub fn plan<'a, S: PayloadSource + ?Sized>(
        &self,
        idx: &'a [u64],
        src: &S,
        par: &dyn Parallel,
    ) -> Result<Plan<'a>> {
        self.check_positions(idx)?;
        if let Some(rb) = self.fixed_raw_bytes() {
            // Opening checked that a record of this size fits in a data file, so
            // the output is backed by data; the entries are checked as they are
            // read.
            let output_len = (idx.len() as u64)
                .checked_mul(rb)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| too_large(idx.len()))?;
            return Ok(Plan {
                ids: idx,
                entries: Vec::new(),
                uniform: Some(rb as usize),
                sizes: Vec::new(),
                layout: None,
                output_len,
                shapes: Vec::new(),
            });
        }
        let (entries, logicals) = self.check_records(idx, src, par)?;
        self.plan_sized(idx, entries, &logicals, Vec::new())
    }

    /// A plan for the records at `idx` resolved before (their checked
    /// `entries` and `sizes`, as [`Metadata::held_entries`] gave them), which
    /// reads nothing of the index: each compressed frame's declared size is
    /// checked against the record's shape from `src`, as [`Metadata::plan`]
    /// checks it.
    pub fn plan_resolved<'a, S: PayloadSource + ?Sized>(
        &self,
        idx: &'a [u64],
        entries: &[Entry],
        sizes: &Sizes,
        src: &S,
    ) -> Result<Plan<'a>> {
        let n = idx.len();
        if entries.len() != n
            || sizes.logicals.len() != n
            || sizes.shapes.len() != n * self.shape_bytes()
        {
            return Err(Error::InvalidArgument(format!(
                "{} resolved records were given for {n} positions",
                entries.len()
            )));
        }
        self.check_positions(idx)?;
        self.check_frames(idx, entries, &sizes.logicals, src)?;
        self.plan_sized(idx, entries.to_vec(), &sizes.logicals, sizes.shapes.clone())
    }

    /// Bytes of a record's shape in its index entry: 0 for Dense.
    pub(crate) fn shape_bytes(&self) -> usize {
        match self.schema().kind {
            Kind::Dense => 0,
            Kind::Ragged => 8 * self.schema().ndim,
        }
    }

    /// The plan of the records at `idx`, whose checked entries and logical
    /// sizes are `entries` and `logicals` (and shapes `shapes`, or none).
    fn plan_sized<'a>(
        &self,
        idx: &'a [u64],
        entries: Vec<Entry>,
        logicals: &[u64],
        shapes: Vec<u8>,
    ) -> Result<Plan<'a>> {
        let mut sizes = Vec::with_capacity(idx.len());
        let mut total: u64 = 0;
        for &logical in logicals {
            total = total
                .checked_add(logical)
                .ok_or_else(|| too_large(idx.len()))?;
            sizes.push(logical as usize);
        }
        let total = usize::try_from(total).map_err(|_| too_large(idx.len()))?;
        let schema = self.schema();
        let (layout, output_len) = match schema.kind {
            Kind::Dense => (None, total),
            Kind::Ragged => {
                let isz = schema.dtype.itemsize();
                let layout = RaggedLayout::new(idx.len(), schema.ndim, total / isz, isz)?;
                let len = layout.total;
                (Some(layout), len)
            }
        };
        Ok(Plan {
            ids: idx,
            entries,
            uniform: None,
            sizes,
            layout,
            output_len,
            shapes,
        })
    }

    /// The one size of every record of a store of raw Dense records, whose
    /// plans need no more than the records' entries ([`Metadata::plan_entries`]);
    /// `None` for any other store.
    pub fn fixed_raw_bytes(&self) -> Option<u64> {
        self.core().dense_bytes.filter(|_| self.core().raw)
    }

    /// A plan for the records at `idx` from their entries (as
    /// [`Metadata::entries`] or [`Metadata::held_entries`] gave them, in the
    /// same order), which reads nothing of the index: for a store of raw
    /// records of one size, whose plan needs nothing else; `None` for any
    /// other store, which plans through its index. Each entry is checked again
    /// as a gather checks it, so entries of another store cannot read outside
    /// this one's data files.
    pub fn plan_entries<'a>(&self, idx: &'a [u64], entries: &[Entry]) -> Result<Option<Plan<'a>>> {
        let Some(rb) = self.fixed_raw_bytes() else {
            return Ok(None);
        };
        if entries.len() != idx.len() {
            return Err(Error::InvalidArgument(format!(
                "{} entries were given for {} records",
                entries.len(),
                idx.len()
            )));
        }
        self.check_positions(idx)?;
        for (&p, &e) in idx.iter().zip(entries) {
            self.check_decoded(p, e, rb)?;
        }
        let output_len = (idx.len() as u64)
            .checked_mul(rb)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| too_large(idx.len()))?;
        Ok(Some(Plan {
            ids: idx,
            entries: entries.to_vec(),
            uniform: Some(rb as usize),
            sizes: Vec::new(),
            layout: None,
            output_len,
            shapes: Vec::new(),
        }))
    }

    /// The checked entries of `idx` and each record's logical size, every
    /// compressed frame's declared size checked: in parts through `par` when
    /// the checks read stored bytes. A failure is the first failing part's, so
    /// the record named does not depend on which thread ran first.
    fn check_records<S: PayloadSource + ?Sized>(
        &self,
        idx: &[u64],
        src: &S,
        par: &dyn Parallel,
    ) -> Result<(Vec<Entry>, Vec<u64>)> {
        let parts = if self.core().raw {
            1
        } else {
            par.parts(usize::MAX, true)
                .min(idx.len() / MIN_CHECKS_PER_PART)
                .max(1)
        };
        let per = idx.len().div_ceil(parts).max(1);
        let found: Vec<Mutex<Option<CheckedPart>>> =
            idx.chunks(per).map(|_| Mutex::new(None)).collect();
        let tasks: Vec<_> = idx.chunks(per).zip(&found).collect();
        run_parts(par, tasks, |(ids, slot)| {
            let got = self.check_part(ids, src);
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(got);
            Ok(())
        })?;
        let mut entries = Vec::with_capacity(idx.len());
        let mut logicals = Vec::with_capacity(idx.len());
        for slot in found {
            let got = slot.into_inner().unwrap_or_else(|e| e.into_inner());
            let (e, l) = got.ok_or_else(|| Error::Internal("a plan part did not run".into()))??;
            entries.extend(e);
            logicals.extend(l);
        }
        Ok((entries, logicals))
    }

    /// [`Metadata::check_records`] of one part: its entries resolved, then its
    /// frames' declared sizes checked with the stored bytes of the records a few
    /// ahead asked for.
    fn check_part<S: PayloadSource + ?Sized>(&self, ids: &[u64], src: &S) -> CheckedPart {
        let (entries, logicals) = self.resolve_sized(ids)?;
        self.check_frames(ids, &entries, &logicals, src)?;
        Ok((entries, logicals))
    }

    /// Checks the declared size of each compressed frame of the records at
    /// `ids` (checked entries `entries`, logical sizes `logicals`), with the
    /// stored bytes of the records a few ahead asked for; nothing for raw.
    fn check_frames<S: PayloadSource + ?Sized>(
        &self,
        ids: &[u64],
        entries: &[Entry],
        logicals: &[u64],
        src: &S,
    ) -> Result<()> {
        if self.core().raw {
            return Ok(());
        }
        for (k, (&p, e)) in ids.iter().zip(entries).enumerate() {
            if let Some(a) = entries.get(k + PREFETCH_AHEAD) {
                src.prefetch(
                    a.file as usize,
                    a.offset..a.offset + u64::from(a.stored_len),
                );
            }
            self.check_declared_size(src, e, p, logicals[k])?;
        }
        Ok(())
    }

    /// The checked entries of `ids` and each record's logical size, with the
    /// index entries a few positions ahead prefetched.
    fn resolve_sized(&self, ids: &[u64]) -> Result<(Vec<Entry>, Vec<u64>)> {
        let mut entries = Vec::with_capacity(ids.len());
        let mut sizes = Vec::with_capacity(ids.len());
        for (k, &p) in ids.iter().enumerate() {
            if let Some(&q) = ids.get(k + PREFETCH_AHEAD) {
                self.prefetch_entry(q);
            }
            let (e, logical) = self.checked_entry(p)?;
            entries.push(e);
            sizes.push(logical);
        }
        Ok((entries, sizes))
    }

    /// The stored bytes of the checked entry `e` in `src`.
    #[inline]
    pub(crate) fn stored<'s, S: PayloadSource + ?Sized>(
        &self,
        src: &'s S,
        e: &Entry,
    ) -> Result<&'s [u8]> {
        let len = u64::from(e.stored_len);
        // Checked entries lie inside their file, so the end cannot overflow.
        match src.bytes(e.file as usize, e.offset..e.offset + len) {
            Some(b) if b.len() as u64 == len => Ok(b),
            Some(b) => Err(Error::Internal(format!(
                "{} bytes handed in for a record of {len} stored bytes",
                b.len()
            ))),
            None => Err(not_held(e.file as usize, e.offset)),
        }
    }

    /// A compressed record's frame must declare exactly its logical size, so
    /// that nothing is allocated for a size the frame does not hold. A checked
    /// store's refusal names damaged stored bytes as such: the frame header is
    /// read before the bytes are hashed, which the decode does.
    #[inline]
    pub(crate) fn check_declared_size<S: PayloadSource + ?Sized>(
        &self,
        src: &S,
        e: &Entry,
        pos: u64,
        logical: u64,
    ) -> Result<()> {
        if self.core().raw {
            return Ok(());
        }
        let stored = self.stored(src, e)?;
        let refuse = |msg: String| {
            if self.info().options().checked && xxh3_64(stored) != e.checksum {
                self.checksum_error(e, pos)
            } else {
                self.payload_error(e, pos, msg)
            }
        };
        let declared = declared_size(stored).map_err(refuse)?;
        if declared != logical {
            return Err(refuse(format!(
                "its frame declares {declared} bytes, its shape needs {logical}"
            )));
        }
        Ok(())
    }
}
