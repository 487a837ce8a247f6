//! A gather whose index blocks and data blocks this process already holds in
//! memory: its records are read from the whole blocks themselves, found by
//! number among those the store's gathers found kept ([`KeptData`]), with no
//! requests planned, no task and no blocking thread. Anything missing sends
//! the gather the usual way, unchanged.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use loaderx_gather::{background, Allocator, Begun, Error, Records, Result};
use rustc_hash::{FxHashMap, FxHashSet};
use zrecord::{data_file, Entry, PayloadSource};

use super::passed::Passed;
use super::pending::{Fetched, Payload, Pending, Planning};
use super::{block_len, RemoteStore};
use crate::cache::Cache;
use crate::fetch::BlockKey;
use crate::index::INDEX_KEY;

/// Raw records at least this long are copied from their blocks straight into
/// their output, piece by piece where they cross a block boundary; shorter ones
/// (and compressed ones) that cross are joined once when the gather begins,
/// and are prefetched while the records before them are copied.
const READ_INTO_MIN_BYTES: usize = 32 << 10;

/// A block a warm gather reads from.
enum Held<'a> {
    /// Kept whole in memory.
    Kept(&'a Bytes),
    /// Its file in the cache, opened: only large raw records lie in it, and
    /// they are read from it straight into their output, as a local store
    /// reads them, where reading the whole block in first would copy it twice.
    File(&'a File, &'a PathBuf),
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

/// Most blocks a store may have for those memory keeps of it to be found by
/// number in a table of them all; past that they are hashed.
const MOST_SLOTS: u64 = 1 << 12;

/// Data blocks of one store, by number.
#[derive(Clone)]
enum Slots {
    /// `table[g]` for each block number `g` of the store.
    Table(Vec<Option<Bytes>>),
    Hashed(FxHashMap<u64, Bytes>),
}

impl Slots {
    fn new(count: u64) -> Slots {
        match usize::try_from(count) {
            Ok(n) if count <= MOST_SLOTS => Slots::Table(vec![None; n]),
            _ => Slots::Hashed(FxHashMap::default()),
        }
    }

    #[inline]
    fn get(&self, g: u64) -> Option<&Bytes> {
        match self {
            Slots::Table(t) => t.get(usize::try_from(g).ok()?)?.as_ref(),
            Slots::Hashed(h) => h.get(&g),
        }
    }

    fn insert(&mut self, g: u64, bytes: Bytes) {
        match self {
            Slots::Table(t) => {
                if let Some(slot) = usize::try_from(g).ok().and_then(|g| t.get_mut(g)) {
                    *slot = Some(bytes);
                }
            }
            Slots::Hashed(h) => {
                h.insert(g, bytes);
            }
        }
    }
}

/// The data blocks of a store that warm gathers found its cache keeping in
/// memory ([`KeptData`]).
pub(crate) struct Seen {
    blocks: Slots,
    /// The cache's count of blocks let go of before these were found.
    released: u64,
    /// When the first of them is due a refresh of its file's time, which
    /// only a read through the cache makes.
    due: Instant,
    /// The records whose bytes in these blocks matched their checksums; none
    /// where a block may have been let go of and read again while the set
    /// was made, so that a record that passed in one copy of a block is never
    /// taken to have passed in another.
    passed: Option<Arc<Passed>>,
}

impl Seen {
    /// Whether the cache still keeps every block of this set, and none is
    /// due a refresh.
    fn holds(&self, cache: &Cache, now: Instant) -> bool {
        self.released == cache.released() && now < self.due
    }
}

/// What a store's warm gathers know of the data blocks its cache keeps in
/// memory: how the blocks are numbered, and those that gathers before found
/// kept, shared by every gather that reads from them. A gather finds each of
/// its blocks there by number, touching none of the cache's names, hashes or
/// reference counts: where a batch of tiny records lies in hundreds of
/// blocks, those cost it a memory miss or more per block. The set is
/// replaced, not changed, when a gather finds more blocks kept, and
/// forgotten once the cache lets go of any block (so that none outlives the
/// cache's hold on it but for the gathers reading it) or a block's file is
/// due a refresh of its time.
pub(super) struct KeptData {
    numbers: Arc<BlockNumbers>,
    seen: Mutex<Option<Arc<Seen>>>,
    /// The last set of passed records, with the count of releases it is
    /// good for: kept when the blocks' set is dropped for a refresh of their
    /// files' times alone.
    passed: Mutex<Option<(u64, Arc<Passed>)>>,
    /// Records in the store.
    records: u64,
}

impl KeptData {
    pub(super) fn new(sizes: &[u64], block_bytes: u64, records: u64) -> KeptData {
        KeptData {
            numbers: Arc::new(BlockNumbers::new(sizes, block_bytes)),
            seen: Mutex::new(None),
            passed: Mutex::new(None),
            records,
        }
    }

    /// The blocks gathers found kept, if the cache still keeps them all.
    fn seen(&self, cache: &Cache) -> Option<Arc<Seen>> {
        let now = Instant::now();
        cache.read_kept(now);
        let mut seen = lock(&self.seen);
        if seen.as_ref().is_some_and(|s| !s.holds(cache, now)) {
            *seen = None;
        }
        seen.clone()
    }

    /// `seen` (or none, with the cache's count of releases `released` read
    /// before `found` was) with the blocks `found` added, for the gathers
    /// after this one too. `now` is the count read after `found` was.
    fn add(
        &self,
        seen: Option<&Seen>,
        released: u64,
        found: Vec<(u64, Bytes, Instant)>,
        now: u64,
    ) -> Arc<Seen> {
        let (mut blocks, mut due, released) = match seen {
            Some(s) => (s.blocks.clone(), Some(s.due), s.released),
            None => (Slots::new(self.numbers.count()), None, released),
        };
        // Only with the count unchanged since the set's blocks were first
        // found: no block was let go of (and so none read again) in between.
        let passed = (now == released).then(|| {
            let mut last = lock(&self.passed);
            match &*last {
                Some((n, p)) if *n == released => p.clone(),
                _ => {
                    let p = Arc::new(Passed::new(self.records));
                    *last = Some((released, p.clone()));
                    p
                }
            }
        });
        for (g, bytes, at) in found {
            blocks.insert(g, bytes);
            due = Some(due.map_or(at, |d| d.min(at)));
        }
        let next = Arc::new(Seen {
            blocks,
            released,
            due: due.unwrap_or_else(Instant::now),
            passed,
        });
        *lock(&self.seen) = Some(next.clone());
        next
    }
}

/// The data blocks (data file, block) that the stored bytes of `entries` lie
/// in, in entry order, a block once per entry that lies in it.
fn entry_blocks(size: BlockSize, entries: &[Entry]) -> impl Iterator<Item = BlockKey> + '_ {
    entries
        .iter()
        .filter(|e| e.stored_len > 0)
        .flat_map(move |e| {
            let end = e.offset + u64::from(e.stored_len);
            (size.of(e.offset)..=size.of(end - 1)).map(move |b| (e.file as usize, b))
        })
}

/// Whole data blocks held in memory or in the cache's files, as the format
/// crate asks for their bytes.
pub(crate) struct Resident {
    numbers: Arc<BlockNumbers>,
    /// The blocks memory keeps of the store, as far as this gather needs.
    seen: Option<Arc<Seen>>,
    /// Blocks of the gather's large raw records that memory does not keep,
    /// opened in the cache's files, by number.
    files: FxHashMap<u64, (File, PathBuf)>,
    /// The records that cross a block boundary and are not read into their
    /// output, joined, by data file and offset.
    joined: FxHashMap<(usize, u64), Box<[u8]>>,
}

impl Resident {
    /// The records that passed their checks in the blocks memory keeps, if
    /// every block of the gather is kept.
    #[inline]
    fn passed(&self) -> Option<&Passed> {
        match self.files.is_empty() {
            true => self.seen.as_ref()?.passed.as_deref(),
            false => None,
        }
    }

    #[inline]
    fn find(&self, g: u64) -> Option<Held<'_>> {
        if let Some(bytes) = self.seen.as_ref().and_then(|s| s.blocks.get(g)) {
            return Some(Held::Kept(bytes));
        }
        self.files.get(&g).map(|(f, path)| Held::File(f, path))
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

    #[inline]
    fn block(&self, file: usize, b: u64) -> Option<&Bytes> {
        let g = self.numbers.number(file, b)?;
        self.seen.as_ref()?.blocks.get(g)
    }

    /// The data blocks the gather of `entries` read, each once.
    pub(super) fn blocks_of(&self, entries: &[Entry]) -> Vec<BlockKey> {
        let mut keys: Vec<BlockKey> = entry_blocks(self.numbers.size, entries).collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Bytes `range` of `file` from the blocks they lie in, joined if more than
    /// one; `None` if a block is not held or is short.
    fn join(&self, file: usize, range: &Range<u64>) -> Option<Box<[u8]>> {
        let mut out = vec![0u8; usize::try_from(range.end - range.start).ok()?];
        self.copy_from(file, range.start, &mut out).ok()?;
        Some(out.into_boxed_slice())
    }

    /// Fills `dst` from `file` at `offset`, from each block in turn. A block
    /// not held or short, or a block file that fails to read (truncated since
    /// it was opened, say), is a damaged cache block, which the gather drops
    /// and fetches again.
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

    /// From memory alone: a block read from its file may have changed.
    #[inline]
    fn checked_before(&self, pos: u64, len: usize) -> bool {
        self.passed().is_some_and(|p| p.holds(pos, len))
    }

    #[inline]
    fn passed_check(&self, pos: u64, len: usize) {
        if let Some(p) = self.passed() {
            p.add(pos, len);
        }
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
        let (Some(cache), Some(kept)) = (&s.cache, &s.kept) else {
            return Ok(None);
        };
        // The records' sizes and shapes come with their entries, so that the
        // plan reads nothing of the index again.
        let (entries, planning) = match self.on_demand() {
            true => match s.index.entries(&s.meta, idx)? {
                Some(r) => (r.entries, Planning::Resolved(r.sizes)),
                None => return Ok(None),
            },
            false => (s.meta.entries(idx)?, Planning::Index),
        };
        let numbers = &kept.numbers;
        let size = numbers.size;
        let raw = s.meta.info().schema().codec == zrecord::Codec::Raw;
        let released = cache.released();
        let mut resident = Resident {
            numbers: numbers.clone(),
            seen: kept.seen(cache),
            files: FxHashMap::default(),
            joined: FxHashMap::default(),
        };
        // Each record's bytes once (a record asked for twice is read, and
        // counted, once): hashing them costs less than sorting them.
        let mut records: FxHashSet<(usize, u64)> = FxHashSet::default();
        records.reserve(entries.len());
        // Blocks the gathers before did not find kept, by data file, block and
        // number, and whether a large raw record (which may be read from the
        // block's file) found it so.
        let mut absent: Vec<(usize, u64, u64, bool)> = Vec::new();
        let mut bytes = 0u64;
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
                if resident.find(g).is_none() {
                    absent.push((file, b, g, read_into));
                }
            }
            resident.prefetch_head(file, start..end);
        }
        if !absent.is_empty() && !self.find_kept(cache, kept, &mut resident, absent, released)? {
            return Ok(None);
        }
        // A small record in a block left in its file needs the block in
        // memory: the usual way reads it in.
        if !resident.files.is_empty()
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
        s.ahead.used(index_keys.chain(entry_blocks(size, &entries)));
        Ok(Some(Fetched {
            planning,
            entries,
            payload: Payload::Resident(Box::new(resident)),
        }))
    }

    /// Finds the blocks `absent` (by data file, block, number, and whether a
    /// large raw record needs it) in the cache's memory, or for large raw
    /// records in its files, for `resident`; the blocks found in memory are
    /// added to `kept` for the gathers after this one. `false` if one is in neither.
    /// `released` is the cache's count of releases before the gather began.
    fn find_kept(
        &self,
        cache: &Cache,
        kept: &KeptData,
        resident: &mut Resident,
        mut absent: Vec<(usize, u64, u64, bool)>,
        released: u64,
    ) -> Result<bool> {
        let s = &self.0;
        let id = s.meta.info().header().checksum;
        let bs = resident.numbers.size.bytes;
        // A block that two records found absent is looked up once; a large
        // record's claim on it stands.
        absent.sort_unstable_by_key(|&(file, b, _, read_into)| (file, b, !read_into));
        absent.dedup_by_key(|&mut (file, b, _, _)| (file, b));
        let mut found = Vec::with_capacity(absent.len());
        let mut to_open = Vec::new();
        {
            let mut memory = cache.kept_blocks(id);
            // Named once per gather: a name formatted per block cost more than
            // its lookup.
            let mut names: Vec<Option<String>> = vec![None; s.sizes.len()];
            for &(file, b, g, read_into) in &absent {
                let Some(name) = names.get_mut(file) else {
                    return Ok(false);
                };
                let name = name.get_or_insert_with(|| data_file(file));
                let len = block_len(&s.sizes, bs, file, b);
                match memory.block(name, b, len) {
                    Some((whole, due)) => found.push((g, whole, due)),
                    None if read_into => to_open.push((file, b, g, len)),
                    None => return Ok(false),
                }
            }
        }
        for (file, b, g, len) in to_open {
            let Some(opened) = cache.open_held(id, &data_file(file), b, len) else {
                return Ok(false);
            };
            resident.files.insert(g, opened);
        }
        if !found.is_empty() {
            let now = cache.released();
            resident.seen = Some(kept.add(resident.seen.as_deref(), released, found, now));
        }
        Ok(true)
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of 16-byte blocks keeping blocks 0, 1 and 2 of store 7's first
    /// data file, block `b` filled with `b`.
    fn cache_keeping_three(dir: &std::path::Path) -> Cache {
        let c = Cache::open(dir, 1 << 20, 16).unwrap();
        for b in 0..3 {
            c.put(7, "data-000.bin", b, &[b as u8; 16]);
            c.read(7, "data-000.bin", b, 16, std::slice::from_ref(&(1..2)))
                .unwrap();
        }
        c
    }

    fn kept(c: &Cache, b: u64) -> (u64, Bytes, Instant) {
        let (bytes, due) = c.kept_blocks(7).block("data-000.bin", b, 16).unwrap();
        (b, bytes, due)
    }

    fn first_byte(seen: &Seen, g: u64) -> Option<u8> {
        seen.blocks.get(g).map(|b| b[0])
    }

    #[test]
    fn blocks_found_kept_are_shared_until_the_cache_lets_one_go() {
        let d = tempfile::tempdir().unwrap();
        let c = cache_keeping_three(d.path());
        let k = KeptData::new(&[48], 16, 3);
        assert!(k.seen(&c).is_none(), "nothing found yet");
        let first = k.add(None, c.released(), vec![kept(&c, 0)], c.released());
        // A set added to keeps the count of releases it began with.
        let both = k.add(Some(&first), 99, vec![kept(&c, 2)], c.released());
        let seen = k.seen(&c).unwrap();
        assert!(Arc::ptr_eq(&seen, &both));
        assert_eq!(
            (0..3).map(|g| first_byte(&seen, g)).collect::<Vec<_>>(),
            [Some(0), None, Some(2)]
        );
        assert_eq!(
            first_byte(&first, 2),
            None,
            "a set is replaced, not changed"
        );
        c.remove(7, "data-000.bin", 1);
        assert!(k.seen(&c).is_none(), "the cache let a block go");
        // Found again, from a count read before they were looked up.
        let released = c.released();
        k.add(None, released, vec![kept(&c, 0)], released);
        assert_eq!(k.seen(&c).and_then(|s| first_byte(&s, 0)), Some(0));
        k.add(None, released - 1, vec![kept(&c, 2)], released);
        assert!(k.seen(&c).is_none(), "a release while they were looked up");
    }

    #[test]
    fn a_set_is_dropped_once_a_block_is_due_a_refresh() {
        let d = tempfile::tempdir().unwrap();
        let c = cache_keeping_three(d.path());
        let k = KeptData::new(&[48], 16, 3);
        let (g, bytes, due) = kept(&c, 1);
        assert!(due > Instant::now());
        k.add(
            None,
            c.released(),
            vec![(g, bytes.clone(), due)],
            c.released(),
        );
        assert!(k.seen(&c).is_some());
        k.add(
            None,
            c.released(),
            vec![kept(&c, 0), (g, bytes, Instant::now())],
            c.released(),
        );
        assert!(
            k.seen(&c).is_none(),
            "block 1 is due: a read through the cache refreshes it"
        );
    }

    #[test]
    fn records_passed_hold_while_no_block_is_let_go_of() {
        let d = tempfile::tempdir().unwrap();
        let c = cache_keeping_three(d.path());
        let k = KeptData::new(&[48], 16, 3);
        let passed = |seen: &Seen| seen.passed.clone();
        let r = c.released();
        let first = k.add(None, r, vec![kept(&c, 0)], r);
        passed(&first).unwrap().add(2, 1 << 10);
        // A set added to, or made again after a refresh, shares them.
        let both = k.add(Some(&first), r, vec![kept(&c, 1)], r);
        let again = k.add(None, r, vec![kept(&c, 2)], r);
        for s in [&both, &again] {
            assert!(passed(s).unwrap().holds(2, 1 << 10));
            assert!(!passed(s).unwrap().holds(1, 1 << 10));
        }
        // A block let go of while a set was being made: that set has none,
        // since a block it found may be another copy than the one checked.
        assert!(passed(&k.add(None, r, vec![kept(&c, 0)], r + 1)).is_none());
        assert!(passed(&k.add(Some(&both), r, vec![kept(&c, 2)], r + 1)).is_none());
        // Once a block has been let go of, the sets made after start empty.
        c.remove(7, "data-000.bin", 1);
        let r = c.released();
        let after = k.add(None, r, vec![kept(&c, 0)], r);
        assert!(!passed(&after).unwrap().holds(2, 1 << 10));
    }

    #[test]
    fn stores_of_many_blocks_have_theirs_hashed_not_tabled() {
        let d = tempfile::tempdir().unwrap();
        let c = cache_keeping_three(d.path());
        let (_, bytes, due) = kept(&c, 2);
        // One block in the first file, the rest in the second.
        for (size, tabled) in [
            (16 * (MOST_SLOTS - 1), true),
            (16 * (MOST_SLOTS - 1) + 1, false),
        ] {
            let k = KeptData::new(&[16, size], 16, 1);
            assert_eq!(k.numbers.count(), 1 + size.div_ceil(16));
            let last = k.numbers.number(1, size.div_ceil(16) - 1).unwrap();
            assert_eq!(last, size.div_ceil(16));
            let seen = k.add(
                None,
                c.released(),
                vec![(last, bytes.clone(), due)],
                c.released(),
            );
            assert_eq!(matches!(seen.blocks, Slots::Table(_)), tabled);
            assert_eq!(
                (first_byte(&seen, last), first_byte(&seen, last - 1)),
                (Some(2), None)
            );
            assert_eq!(
                k.numbers.number(1, size.div_ceil(16)),
                None,
                "past the file"
            );
        }
    }
}
