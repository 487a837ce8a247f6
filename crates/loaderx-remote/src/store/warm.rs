//! A gather whose index blocks and data blocks this process already holds in
//! memory: its records are read from the whole blocks themselves, found by a
//! binary search over the gather's own blocks, with no requests planned, no
//! task, no blocking thread, and one lock per map. Anything missing sends the
//! gather the usual way, unchanged.

use std::ops::Range;

use bytes::Bytes;
use loaderx_gather::Result;
use zrecord::{data_file, PayloadSource};

use super::pending::{Fetched, Payload};
use super::{block_len, RemoteStore};
use crate::fetch::BlockKey;
use crate::index::INDEX_KEY;

/// Raw records at least this long are copied from their blocks straight into
/// their output, piece by piece where they cross a block boundary; shorter ones
/// (and compressed ones) that cross are joined once when the gather begins,
/// and are prefetched while the records before them are copied.
const READ_INTO_MIN_BYTES: usize = 32 << 10;

/// Whole data blocks held in memory, as the format crate asks for their bytes.
pub(crate) struct Resident {
    bs: u64,
    /// Per data file, its blocks by number.
    blocks: Vec<Vec<(u64, Bytes)>>,
    /// Per data file, the records that cross a block boundary and are not read
    /// into their output, joined, by offset.
    joined: Vec<Vec<(u64, Box<[u8]>)>>,
}

impl Resident {
    fn block(&self, file: usize, b: u64) -> Option<&Bytes> {
        let v = self.blocks.get(file)?;
        v.binary_search_by_key(&b, |x| x.0).ok().map(|k| &v[k].1)
    }

    /// Bytes `range` of `file` from the blocks they lie in, joined if more than
    /// one; `None` if a block is not held or is short.
    fn join(&self, file: usize, range: &Range<u64>) -> Option<Box<[u8]>> {
        let mut out = vec![0u8; usize::try_from(range.end - range.start).ok()?];
        self.copy(file, range.start, &mut out)?;
        Some(out.into_boxed_slice())
    }

    /// Fills `dst` from `file` at `offset`, from each block in turn.
    fn copy(&self, file: usize, offset: u64, dst: &mut [u8]) -> Option<()> {
        let mut at = offset;
        let mut rest = dst;
        while !rest.is_empty() {
            let b = at / self.bs;
            let from = usize::try_from(at - b * self.bs).ok()?;
            let src = self.block(file, b)?.get(from..)?;
            let n = src.len().min(rest.len());
            if n == 0 {
                return None;
            }
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
            head.copy_from_slice(&src[..n]);
            rest = tail;
            at += n as u64;
        }
        Some(())
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
        let v = self.joined.get(file)?;
        let k = v.binary_search_by_key(&range.start, |j| j.0).ok()?;
        Some(&v[k].1[..]).filter(|j| j.len() as u64 == range.end - range.start)
    }

    #[inline]
    fn reads_into(&self, len: usize) -> bool {
        len >= READ_INTO_MIN_BYTES
    }

    fn read_into(&self, file: usize, offset: u64, dst: &mut [u8]) -> zrecord::Result<()> {
        self.copy(file, offset, dst).ok_or_else(|| {
            zrecord::Error::Internal(format!(
                "the stored bytes at offset {offset} of data file {file} are not held"
            ))
        })
    }
}

impl RemoteStore {
    /// The stored bytes of the records at `idx` (positions already checked;
    /// `needed` their index blocks, `None` for an index read whole) if memory
    /// holds every block they lie in; `None` if any must come from the cache's
    /// files or object storage. Counted as read from the cache, as the same
    /// bytes are on the other way.
    pub(super) fn warm_fetched(
        &self,
        idx: &[u64],
        needed: Option<&[usize]>,
    ) -> Result<Option<Fetched>> {
        let s = &self.0;
        let Some(cache) = &s.cache else {
            return Ok(None);
        };
        let view = match needed {
            Some(n) => match s.index.get_all(n) {
                Some(blocks) => Some(s.meta.with_blocks(blocks)?),
                None => return Ok(None),
            },
            None => None,
        };
        let entries = match &view {
            Some(v) => v.entries(idx)?,
            None => s.meta.entries(idx)?,
        };
        let bs = cache.block_bytes();
        let files = s.sizes.len();
        // The records' stored bytes in order, each once (a record asked for
        // twice is read, and counted, once): their blocks follow in order.
        let mut stored: Vec<(usize, u64, u64)> = entries
            .iter()
            .map(|e| {
                (
                    e.file as usize,
                    e.offset,
                    e.offset + u64::from(e.stored_len),
                )
            })
            .collect();
        stored.sort_unstable();
        stored.dedup();
        let mut keys: Vec<BlockKey> = Vec::with_capacity(stored.len());
        let mut bytes = 0u64;
        for &(file, start, end) in &stored {
            bytes += end - start;
            if end > start {
                for b in start / bs..=(end - 1) / bs {
                    if keys.last() != Some(&(file, b)) {
                        keys.push((file, b));
                    }
                }
            }
        }
        let mut blocks: Vec<Vec<(u64, Bytes)>> = vec![Vec::new(); files];
        {
            let id = s.meta.info().header().checksum;
            let mut kept = cache.kept_blocks(id);
            let mut name = (usize::MAX, String::new());
            for &(file, b) in &keys {
                if name.0 != file {
                    name = (file, data_file(file));
                }
                let len = block_len(&s.sizes, bs, file, b);
                let Some(whole) = kept.block(&name.1, b, len) else {
                    return Ok(None);
                };
                match blocks.get_mut(file) {
                    Some(v) => v.push((b, whole)),
                    None => return Ok(None),
                }
            }
        }
        let mut resident = Resident {
            bs,
            blocks,
            joined: vec![Vec::new(); files],
        };
        let raw = s.meta.info().schema().codec == zrecord::Codec::Raw;
        for &(file, start, end) in &stored {
            let crosses = end > start && (end - 1) / bs != start / bs;
            let len = (end - start) as usize;
            if crosses && !(raw && resident.reads_into(len)) {
                let Some(j) = resident.join(file, &(start..end)) else {
                    return Ok(None);
                };
                match resident.joined.get_mut(file) {
                    Some(v) => v.push((start, j)),
                    None => return Ok(None),
                }
            }
        }
        // Through source(): a forked child counts on a fetcher of its own.
        self.source()?
            .fetcher
            .traffic
            .add_from_cache(bytes as usize);
        let index_keys = needed.into_iter().flatten().map(|&b| (INDEX_KEY, b as u64));
        s.ahead.used(index_keys.chain(keys.iter().copied()));
        Ok(Some(Fetched {
            view,
            entries,
            payload: Payload::Resident(resident),
            cached: keys,
        }))
    }
}
