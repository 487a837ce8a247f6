//! A gather whose index blocks and data blocks this process already holds in
//! memory: its records are read from the whole blocks themselves, found by
//! hashing the gather's own blocks, with no requests planned, no
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

/// Whole data blocks held in memory or in the cache's files, as the format
/// crate asks for their bytes.
pub(crate) struct Resident {
    bs: u64,
    /// The gather's blocks, by data file and number.
    blocks: FxHashMap<BlockKey, Held>,
    /// The records that cross a block boundary and are not read into their
    /// output, joined, by data file and offset.
    joined: FxHashMap<(usize, u64), Box<[u8]>>,
}

impl Resident {
    #[inline]
    fn block(&self, file: usize, b: u64) -> Option<&Bytes> {
        match self.blocks.get(&(file, b))? {
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
        let mut at = offset;
        let mut rest = dst;
        while !rest.is_empty() {
            let b = at / self.bs;
            let from = at - b * self.bs;
            let n = match self.blocks.get(&(file, b)).ok_or_else(not_held)? {
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
                    let n = usize::try_from(self.bs - from)
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
        let b = range.start / self.bs;
        if (range.end - 1) / self.bs == b {
            let base = b * self.bs;
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
        let bs = cache.block_bytes();
        let raw = s.meta.info().schema().codec == zrecord::Codec::Raw;
        let mut resident = Resident {
            bs,
            blocks: FxHashMap::default(),
            joined: FxHashMap::default(),
        };
        // Each record's bytes once (a record asked for twice is read, and
        // counted, once), and each block once, in no order: hashing them costs
        // less than sorting them.
        let mut records: FxHashSet<(usize, u64)> = FxHashSet::default();
        records.reserve(entries.len());
        let mut keys: Vec<BlockKey> = Vec::new();
        // Blocks of large raw records that memory does not keep, with their
        // lengths: opened from the cache's files once the lock is let go.
        let mut to_open: Vec<(BlockKey, u64)> = Vec::new();
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
                for b in start / bs..=(end - 1) / bs {
                    if resident.blocks.contains_key(&(file, b)) {
                        continue;
                    }
                    let Some(name) = names.get_mut(file) else {
                        return Ok(None);
                    };
                    let name = name.get_or_insert_with(|| data_file(file));
                    let len = block_len(&s.sizes, bs, file, b);
                    match kept.block(name, b, len) {
                        Some(whole) => {
                            resident.blocks.insert((file, b), Held::Kept(whole));
                        }
                        None if read_into => to_open.push(((file, b), len)),
                        None => return Ok(None),
                    }
                    keys.push((file, b));
                }
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
        for ((file, b), len) in to_open {
            let Some((f, path)) = cache.open_held(id, &data_file(file), b, len) else {
                return Ok(None);
            };
            resident.blocks.insert((file, b), Held::File(f, path));
        }
        // A small record in a block left in its file needs the block in
        // memory: the usual way reads it in.
        if resident
            .blocks
            .values()
            .any(|h| matches!(h, Held::File(..)))
            && entries
                .iter()
                .any(|e| !(raw && resident.reads_into(e.stored_len as usize)))
        {
            return Ok(None);
        }
        for e in &entries {
            let (file, start) = (e.file as usize, e.offset);
            let end = start + u64::from(e.stored_len);
            let crosses = end > start && (end - 1) / bs != start / bs;
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
            payload: Payload::Resident(resident),
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
