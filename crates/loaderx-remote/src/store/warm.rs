//! A gather whose index blocks and data blocks this process already holds in
//! memory: its records are read from the whole blocks themselves, found by
//! number in a table of the gather's own blocks, with no requests planned, no
//! task, no blocking thread, and one lock per map. Anything missing sends the
//! gather the usual way, unchanged.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use loaderx_gather::{background, Allocator, Begun, Error, Records, Result};
use rustc_hash::{FxHashMap, FxHashSet};
use zrecord::{data_file, PayloadSource};

use super::pending::{Fetched, Payload, Pending};
use super::{block_len, RemoteStore};
use crate::fetch::BlockKey;
use crate::index::INDEX_KEY;

/// Raw records at least this long are copied from their blocks straight into
/// their output, piece by piece where they cross a block boundary; shorter ones
/// (and compressed ones) that cross are joined once when the gather begins,
/// and are prefetched while the records before them are copied.
const READ_INTO_MIN_BYTES: usize = 32 << 10;

/// A block a warm gather reads from.
enum Held {
    /// Kept whole in memory.
    Kept(Bytes),
    /// Its file in the cache, opened: only large raw records lie in it, and
    /// they are read from it straight into their output, as a local store
    /// reads them, where reading the whole block in first would copy it twice.
    File(File, PathBuf),
}

/// Where offsets of a data file fall in blocks of the cache's size: a shift
/// for a power of two (the default size), a division otherwise.
#[derive(Clone, Copy)]
struct BlockSize {
    bytes: u64,
    /// `bytes.trailing_zeros()` for a power of two, else `u32::MAX`.
    shift: u32,
}

impl BlockSize {
    fn new(bytes: u64) -> BlockSize {
        let shift = match bytes.is_power_of_two() {
            true => bytes.trailing_zeros(),
            false => u32::MAX,
        };
        BlockSize { bytes, shift }
    }

    /// The block offset `at` lies in.
    #[inline]
    fn of(self, at: u64) -> u64 {
        match self.shift {
            u32::MAX => at / self.bytes,
            s => at >> s,
        }
    }
}

/// Numbers the blocks of a store's data files in one sequence, each file's
/// after the file before's, so that a gather finds its blocks by indexing a
/// table rather than by hashing: it looks one up several times a record.
pub(super) struct BlockNumbers {
    size: BlockSize,
    /// The number of each data file's first block, then the count of all.
    first: Box<[u64]>,
}

impl BlockNumbers {
    pub(super) fn new(sizes: &[u64], block_bytes: u64) -> BlockNumbers {
        let mut first = Vec::with_capacity(sizes.len() + 1);
        let mut n = 0u64;
        for &size in sizes {
            first.push(n);
            n = n.saturating_add(size.div_ceil(block_bytes.max(1)));
        }
        first.push(n);
        BlockNumbers {
            size: BlockSize::new(block_bytes.max(1)),
            first: first.into_boxed_slice(),
        }
    }

    /// The number of the block of data file `file` that offset `at` lies in;
    /// `None` for a file the store does not have.
    #[inline]
    fn of(&self, file: usize, at: u64) -> Option<u64> {
        self.number(file, self.size.of(at))
    }

    /// The number of block `b` of data file `file`; `None` past the file's
    /// blocks, so that no block stands for another file's.
    #[inline]
    fn number(&self, file: usize, b: u64) -> Option<u64> {
        let (first, next) = (*self.first.get(file)?, *self.first.get(file + 1)?);
        first.checked_add(b).filter(|&g| g < next)
    }

    fn count(&self) -> u64 {
        self.first.last().copied().unwrap_or(0)
    }
}

/// Most slots a gather's table of blocks has, indexed by block number: past
/// that span (an IID gather over a store of more than this many blocks) its
/// blocks are hashed.
const MOST_SLOTS: u64 = 1 << 12;

/// Whole data blocks held in memory or in the cache's files, as the format
/// crate asks for their bytes.
pub(crate) struct Resident {
    numbers: Arc<BlockNumbers>,
    /// The gather's blocks.
    held: Vec<Held>,
    /// `slots[g - lo]` is 1 + the place in `held` of block number `g`, 0 for
    /// a block not held; empty where `hashed` finds them instead.
    lo: u64,
    slots: Vec<u32>,
    hashed: FxHashMap<u64, u32>,
    /// The records that cross a block boundary and are not read into their
    /// output, joined, by data file and offset.
    joined: FxHashMap<(usize, u64), Box<[u8]>>,
}

impl Resident {
    /// An empty set for blocks numbered `lo..=hi`.
    fn new(numbers: Arc<BlockNumbers>, lo: u64, hi: u64) -> Resident {
        let span = hi.saturating_sub(lo).saturating_add(1);
        let slots = match span <= MOST_SLOTS {
            true => vec![0; span as usize],
            false => Vec::new(),
        };
        Resident {
            numbers,
            held: Vec::new(),
            lo,
            slots,
            hashed: FxHashMap::default(),
            joined: FxHashMap::default(),
        }
    }

    #[inline]
    fn find(&self, g: u64) -> Option<&Held> {
        let at = match self.slots.is_empty() {
            false => *self
                .slots
                .get(usize::try_from(g.checked_sub(self.lo)?).ok()?)?,
            true => *self.hashed.get(&g)?,
        };
        self.held.get((at as usize).checked_sub(1)?)
    }

    fn contains(&self, g: u64) -> bool {
        self.find(g).is_some()
    }

    fn insert(&mut self, g: u64, held: Held) {
        self.held.push(held);
        let at = self.held.len() as u32;
        match self.slots.is_empty() {
            false => {
                if let Some(s) = g
                    .checked_sub(self.lo)
                    .and_then(|k| self.slots.get_mut(usize::try_from(k).ok()?))
                {
                    *s = at;
                }
            }
            true => {
                self.hashed.insert(g, at);
            }
        }
    }

    /// Asks the CPU for the head of the stored bytes `range` of data file
    /// `file` ([`zrecord::prefetch_head`]), if their block is kept: the
    /// gather copies the record a moment later, and the lines of a whole
    /// batch are on their way together.
    #[inline]
    fn prefetch_head(&self, file: usize, range: Range<u64>) {
        let size = self.numbers.size;
        let b = size.of(range.start);
        let Some(bytes) = self.block(file, b) else {
            return;
        };
        let len = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
        if let Some(record) = usize::try_from(range.start - b * size.bytes)
            .ok()
            .and_then(|k| bytes.get(k..k.saturating_add(len).min(bytes.len())))
        {
            zrecord::prefetch_head(record);
        }
    }

    fn any_in_files(&self) -> bool {
        self.held.iter().any(|h| matches!(h, Held::File(..)))
    }

    #[inline]
    fn block(&self, file: usize, b: u64) -> Option<&Bytes> {
        match self.find(self.numbers.number(file, b)?)? {
            Held::Kept(bytes) => Some(bytes),
            Held::File(..) => None,
        }
    }

    /// Bytes `range` of `file` from the blocks they lie in, joined if more than
    /// one; `None` if a block is not held or is short.
    fn join(&self, file: usize, range: &Range<u64>) -> Option<Box<[u8]>> {
        let mut out = vec![0u8; usize::try_from(range.end - range.start).ok()?];
        self.copy(file, range.start, &mut out)?;
        Some(out.into_boxed_slice())
    }

    /// Fills `dst` from `file` at `offset`, from each block in turn; `None`
    /// if a block is not held or is short.
    fn copy(&self, file: usize, offset: u64, dst: &mut [u8]) -> Option<()> {
        self.copy_from(file, offset, dst).ok()
    }

    /// As [`Resident::copy`]; a block file that fails to read (truncated since
    /// it was opened, say) is a damaged cache block, which the gather drops and
    /// fetches again.
    fn copy_from(&self, file: usize, offset: u64, dst: &mut [u8]) -> zrecord::Result<()> {
        let not_held = || {
            zrecord::Error::Internal(format!(
                "the stored bytes at offset {offset} of data file {file} are not held"
            ))
        };
        let bs = self.numbers.size.bytes;
        let mut at = offset;
        let mut rest = dst;
        while !rest.is_empty() {
            let b = self.numbers.size.of(at);
            let from = at - b * bs;
            let g = self.numbers.of(file, at).ok_or_else(not_held)?;
            let n = match self.find(g).ok_or_else(not_held)? {
                Held::Kept(bytes) => {
                    let src = usize::try_from(from)
                        .ok()
                        .and_then(|from| bytes.get(from..))
                        .filter(|src| !src.is_empty())
                        .ok_or_else(not_held)?;
                    let n = src.len().min(rest.len());
                    rest[..n].copy_from_slice(&src[..n]);
                    n
                }
                Held::File(f, path) => {
                    let n = usize::try_from(bs - from)
                        .unwrap_or(usize::MAX)
                        .min(rest.len());
                    f.read_exact_at(&mut rest[..n], from)
                        .map_err(|e| zrecord::Error::Corrupt {
                            path: path.clone(),
                            record: None,
                            msg: format!("the cached block could not be read whole: {e}"),
                        })?;
                    n
                }
            };
            rest = &mut std::mem::take(&mut rest)[n..];
            at += n as u64;
        }
        Ok(())
    }
}

impl PayloadSource for Resident {
    #[inline]
    fn bytes(&self, file: usize, range: Range<u64>) -> Option<&[u8]> {
        if range.is_empty() {
            return Some(&[]);
        }
        let size = self.numbers.size;
        let b = size.of(range.start);
        if size.of(range.end - 1) == b {
            let base = b * size.bytes;
            let (lo, hi) = (
                usize::try_from(range.start - base).ok()?,
                usize::try_from(range.end - base).ok()?,
            );
            return self.block(file, b)?.get(lo..hi);
        }
        let j = self.joined.get(&(file, range.start))?;
        Some(&j[..]).filter(|j| j.len() as u64 == range.end - range.start)
    }

    #[inline]
    fn reads_into(&self, len: usize) -> bool {
        len >= READ_INTO_MIN_BYTES
    }

    /// Nothing: the records' heads were asked for as the gather found their
    /// blocks ([`Resident::prefetch_head`]).
    #[inline]
    fn prefetch(&self, _file: usize, _range: Range<u64>) {}

    fn read_into(&self, file: usize, offset: u64, dst: &mut [u8]) -> zrecord::Result<()> {
        self.copy_from(file, offset, dst)
    }
}

impl RemoteStore {
    /// The stored bytes of the records at `idx` if memory holds every block
    /// they lie in, their index blocks too, but for blocks of large raw
    /// records only, which may be in the cache's files instead; `None` if any
    /// must come from elsewhere (the cache's files through the usual way, or
    /// object storage). Positions are checked here. Counted as read from the
    /// cache, as the same bytes are on the other way.
    pub(super) fn warm_fetched(&self, idx: &[u64]) -> Result<Option<Fetched>> {
        let s = &self.0;
        let Some(cache) = &s.cache else {
            return Ok(None);
        };
        let on_demand = self.on_demand();
        let entries = if on_demand {
            match s.index.entries(&s.meta, idx)? {
                Some(e) => e,
                None => return Ok(None),
            }
        } else {
            s.meta.entries(idx)?
        };
        // A store whose plan reads more of the index than the entries (its
        // records' shapes, say) is decoded through a view of its blocks.
        let view = match on_demand && s.meta.fixed_raw_bytes().is_none() {
            true => match s.index.get_all(&s.meta.index_blocks(idx)?) {
                Some(blocks) => Some(s.meta.with_blocks(blocks)?),
                None => return Ok(None),
            },
            false => None,
        };
        let Some(numbers) = &s.numbers else {
            return Ok(None);
        };
        let size = numbers.size;
        let raw = s.meta.info().schema().codec == zrecord::Codec::Raw;
        // A table of slots for the whole store when it is small, else for the
        // span of blocks this gather touches (hashed if that is wide).
        let (lo, hi) = match numbers.count() <= MOST_SLOTS {
            true => (0, numbers.count().saturating_sub(1)),
            false => {
                let (mut lo, mut hi) = (u64::MAX, 0);
                for e in &entries {
                    let end = e.offset + u64::from(e.stored_len);
                    let (Some(first), Some(last)) = (
                        numbers.of(e.file as usize, e.offset),
                        numbers.of(e.file as usize, end.saturating_sub(1).max(e.offset)),
                    ) else {
                        return Ok(None);
                    };
                    (lo, hi) = (lo.min(first), hi.max(last));
                }
                (lo, hi)
            }
        };
        let mut resident = Resident::new(numbers.clone(), lo, hi);
        // Each record's bytes once (a record asked for twice is read, and
        // counted, once), and each block once, in no order: hashing them costs
        // less than sorting them.
        let mut records: FxHashSet<(usize, u64)> = FxHashSet::default();
        records.reserve(entries.len());
        let mut keys: Vec<BlockKey> = Vec::new();
        // Blocks of large raw records that memory does not keep, with their
        // numbers and lengths: opened from the cache's files once the lock is
        // let go.
        let mut to_open: Vec<(BlockKey, u64, u64)> = Vec::new();
        let mut bytes = 0u64;
        {
            let id = s.meta.info().header().checksum;
            let mut kept = cache.kept_blocks(id);
            // Named once per gather: records of a store's data files come in
            // no order, and a name formatted per block cost more than its lookup.
            let mut names: Vec<Option<String>> = vec![None; s.sizes.len()];
            for e in &entries {
                let (file, start) = (e.file as usize, e.offset);
                let end = start + u64::from(e.stored_len);
                if end == start || !records.insert((file, start)) {
                    continue;
                }
                bytes += end - start;
                let read_into = raw && resident.reads_into(e.stored_len as usize);
                for b in size.of(start)..=size.of(end - 1) {
                    let Some(g) = numbers.number(file, b) else {
                        return Ok(None);
                    };
                    if resident.contains(g) {
                        continue;
                    }
                    let Some(name) = names.get_mut(file) else {
                        return Ok(None);
                    };
                    let name = name.get_or_insert_with(|| data_file(file));
                    let len = block_len(&s.sizes, size.bytes, file, b);
                    match kept.block(name, b, len) {
                        Some(whole) => resident.insert(g, Held::Kept(whole)),
                        None if read_into => to_open.push(((file, b), g, len)),
                        None => return Ok(None),
                    }
                    keys.push((file, b));
                }
                resident.prefetch_head(file, start..end);
            }
        }
        if !to_open.is_empty() {
            // Two large records may share a block memory does not keep.
            to_open.sort_unstable();
            to_open.dedup();
            keys.sort_unstable();
            keys.dedup();
        }
        let id = s.meta.info().header().checksum;
        for ((file, b), g, len) in to_open {
            let Some((f, path)) = cache.open_held(id, &data_file(file), b, len) else {
                return Ok(None);
            };
            resident.insert(g, Held::File(f, path));
        }
        // A small record in a block left in its file needs the block in
        // memory: the usual way reads it in.
        if resident.any_in_files()
            && entries
                .iter()
                .any(|e| !(raw && resident.reads_into(e.stored_len as usize)))
        {
            return Ok(None);
        }
        for e in &entries {
            let (file, start) = (e.file as usize, e.offset);
            let end = start + u64::from(e.stored_len);
            let crosses = end > start && size.of(end - 1) != size.of(start);
            let len = e.stored_len as usize;
            if crosses
                && !(raw && resident.reads_into(len))
                && !resident.joined.contains_key(&(file, start))
            {
                let Some(j) = resident.join(file, &(start..end)) else {
                    return Ok(None);
                };
                resident.joined.insert((file, start), j);
            }
        }
        // Through source(): a forked child counts on a fetcher of its own.
        self.source()?
            .fetcher
            .traffic
            .add_from_cache(bytes as usize);
        // Walked only if blocks fetched ahead are waiting to be used.
        let index_keys = idx.iter().flat_map(|&i| {
            let (first, last) = s.meta.entry_blocks(i);
            [(INDEX_KEY, first as u64), (INDEX_KEY, last as u64)]
        });
        s.ahead.used(index_keys.chain(keys.iter().copied()));
        Ok(Some(Fetched {
            view,
            entries,
            payload: Payload::Resident(Box::new(resident)),
            cached: keys,
        }))
    }
}

/// Begins a gather of `idx` on the background gather thread, lookups and all,
/// where the gather before it found its blocks in memory: the caller only
/// queues it, as it queues a local store's. If its blocks are no longer all in
/// memory when its turn comes, the thread begins it the usual way (its
/// requests sent, not waited for) and the caller's finish waits for them, so
/// that a miss never holds up the gathers queued behind it.
pub(super) fn begin_behind(
    store: Arc<RemoteStore>,
    idx: Vec<u64>,
    allocator: Allocator,
) -> Result<Box<dyn Begun>> {
    let missed: Arc<Mutex<Option<Pending>>> = Arc::default();
    let (len, to) = (idx.len(), missed.clone());
    let work = {
        let allocator = allocator.clone();
        move || match store.warm_fetched(&idx)? {
            Some(fetched) => store.here(idx, fetched).finish(&allocator),
            None => {
                store.0.warm_streak.store(false, Ordering::Relaxed);
                *lock(&to) = Some(store.fetching(&idx)?);
                // Never seen: the caller's finish takes the gather just begun.
                Err(Error::internal("begun again, not in memory"))
            }
        }
    };
    Ok(Box::new(Behind {
        ahead: background::begin(len, Box::new(work))?,
        missed,
        allocator,
    }))
}

fn lock(m: &Mutex<Option<Pending>>) -> MutexGuard<'_, Option<Pending>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A gather queued by [`begin_behind`], and the gather its background work
/// began the usual way if its blocks had left memory.
struct Behind {
    ahead: Box<dyn Begun>,
    missed: Arc<Mutex<Option<Pending>>>,
    allocator: Allocator,
}

impl Begun for Behind {
    fn len(&self) -> usize {
        self.ahead.len()
    }

    fn cancel(&self) {
        self.ahead.cancel();
        if let Some(p) = &*lock(&self.missed) {
            p.canceller().cancel();
        }
    }

    fn is_ready(&self) -> bool {
        self.ahead.is_ready() && lock(&self.missed).as_ref().is_none_or(Pending::is_ready)
    }

    fn work_time(&self) -> Option<Duration> {
        self.ahead.work_time()
    }

    fn finish(&self) -> Result<Records> {
        let done = self.ahead.finish();
        match lock(&self.missed).take() {
            Some(p) => p.finish(&self.allocator),
            None => done,
        }
    }
}
