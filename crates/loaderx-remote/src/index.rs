//! A remote store's index, fetched on demand: opening reads `index.sum` and no
//! part of `index.bin`; a read asks for the index blocks its records' entries
//! lie in, and each comes from this process's memory, from the block cache, or
//! from object storage, in that order. Every block that comes in from the cache
//! or the network is checked against `index.sum` before anything reads it
//! (the format crate's check, the one a local store makes); a block that fails
//! from the cache is dropped there and fetched again, one that fails from the
//! network is an error naming the store's index and the block.
//!
//! Memory holds at most a budget of blocks between reads (least recently used
//! first out), so a process's memory for a store does not grow with its record
//! count; the blocks one read needs are held by that read until it ends, over
//! the budget if they must be.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use loaderx_gather::{Error, Result};
use zrecord::{CheckedBlock, HeldBlocks, IndexSource, Metadata, INDEX_FILE};

use crate::cache::Cache;
use crate::fetch::Fetcher;

/// Bytes of index blocks a store keeps in memory between reads unless the
/// `index_memory_bytes` storage option says otherwise: 1024 blocks, the entries
/// of about 2.8 million Dense records, so that a sampler walking a window of
/// the store finds its entries in memory, at a cost that does not depend on the
/// store's size.
pub const DEFAULT_INDEX_MEMORY_BYTES: u64 = 64 << 20;

/// Index blocks one step of a read over a range of records (sizes, verify)
/// fetches and holds at once: 16 MiB.
pub(crate) const STEP_BLOCKS: usize = 256;

/// A checked index block.
pub(crate) type Block = CheckedBlock<Bytes>;

/// A view of a store over the index blocks one read holds.
pub(crate) type View = Metadata<HeldBlocks<Bytes>>;

/// What a store's index is: read whole at open (a version 1 store, which has
/// no block checksums), or fetched block by block.
pub(crate) enum RemoteIndex {
    Whole(Vec<u8>),
    OnDemand(u64),
}

impl IndexSource for RemoteIndex {
    fn len(&self) -> u64 {
        match self {
            RemoteIndex::Whole(v) => v.len() as u64,
            RemoteIndex::OnDemand(n) => *n,
        }
    }

    fn bytes(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        match self {
            RemoteIndex::Whole(v) => v.get(range),
            RemoteIndex::OnDemand(_) => None,
        }
    }
}

/// Where a read's blocks may come from and go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    /// A gather: memory, then the cache, then the network; what came in is
    /// kept in both.
    Gather,
    /// A scan over many records (their sizes): as a gather, but nothing is
    /// kept in memory, so that a scan does not push out a gather's blocks.
    Scan,
    /// A verify: the network only, nothing kept.
    Verify,
}

/// The blocks a store keeps in memory, least recently used first out.
pub(crate) struct Memory {
    budget: u64,
    inner: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    /// Block number to the block and its last use.
    blocks: HashMap<usize, (Block, u64)>,
    /// Last use to block number.
    order: BTreeMap<u64, usize>,
    tick: u64,
    bytes: u64,
}

impl Memory {
    pub fn new(budget: u64) -> Memory {
        Memory {
            budget,
            inner: Mutex::new(Lru::default()),
        }
    }

    /// Block `b` if memory holds it, marked used.
    pub fn get(&self, b: usize) -> Option<Block> {
        let mut lru = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        lru.tick += 1;
        let tick = lru.tick;
        let (block, used) = lru.blocks.get_mut(&b)?;
        let (block, old) = (block.clone(), std::mem::replace(used, tick));
        lru.order.remove(&old);
        lru.order.insert(tick, b);
        Some(block)
    }

    /// Keeps `block`, dropping the least recently used past the budget.
    pub fn put(&self, block: Block) {
        let n = block.bytes().len() as u64;
        if n > self.budget {
            return;
        }
        let mut lru = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let b = block.block();
        if lru.blocks.contains_key(&b) {
            return;
        }
        while lru.bytes + n > self.budget {
            let Some((_, old)) = lru.order.pop_first() else {
                break;
            };
            if let Some((gone, _)) = lru.blocks.remove(&old) {
                lru.bytes -= gone.bytes().len() as u64;
            }
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.order.insert(tick, b);
        lru.blocks.insert(b, (block, tick));
        lru.bytes += n;
    }

    /// Bytes of blocks held, and how many.
    pub fn held(&self) -> (u64, usize) {
        let lru = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (lru.bytes, lru.blocks.len())
    }
}

/// What fetches a store's index blocks: everything owned, so that a fetch can
/// run on the runtime while its caller goes on.
pub(crate) struct Blocks<'a, I> {
    pub meta: &'a Metadata<I>,
    pub fetcher: &'a Fetcher,
    pub cache: Option<&'a Arc<Cache>>,
    pub memory: &'a Memory,
}

impl<I: IndexSource> Blocks<'_, I> {
    /// The blocks `needed` (sorted, each once), checked, in order.
    pub async fn get(&self, needed: &[usize], how: Use) -> Result<Vec<Block>> {
        let mut found: HashMap<usize, Block> = HashMap::with_capacity(needed.len());
        let mut missing: Vec<usize> = Vec::new();
        for &b in needed {
            match self.memory.get(b).filter(|_| how != Use::Verify) {
                Some(block) => {
                    found.insert(b, block);
                }
                None => missing.push(b),
            }
        }
        let cache = self.cache.filter(|_| how != Use::Verify);
        if let (Some(cache), false) = (cache, missing.is_empty()) {
            let from_cache = self.read_cached(cache, &missing).await?;
            missing.retain(|b| !from_cache.iter().any(|k| k.block() == *b));
            for block in from_cache {
                if how == Use::Gather {
                    self.memory.put(block.clone());
                }
                found.insert(block.block(), block);
            }
        }
        let fetched = self.fetch(&missing).await?;
        if let Some(cache) = cache {
            let (c, id) = (cache.clone(), self.id());
            let kept: Vec<Block> = fetched.clone();
            tokio::task::spawn_blocking(move || {
                for b in kept {
                    c.put(id, INDEX_FILE, b.block() as u64, b.bytes());
                }
            })
            .await
            .map_err(|e| Error::internal(format!("writing the cache did not complete: {e}")))?;
        }
        for block in fetched {
            if how == Use::Gather {
                self.memory.put(block.clone());
            }
            found.insert(block.block(), block);
        }
        needed
            .iter()
            .map(|b| {
                found
                    .remove(b)
                    .ok_or_else(|| Error::internal(format!("index block {b} was not read")))
            })
            .collect()
    }

    fn id(&self) -> u64 {
        self.meta.info().header().checksum
    }

    /// The blocks of `wanted` the cache holds whole and sound; a block that
    /// fails its check is dropped from the cache (and fetched by the caller).
    async fn read_cached(&self, cache: &Arc<Cache>, wanted: &[usize]) -> Result<Vec<Block>> {
        let lens: Vec<(usize, u64)> = wanted
            .iter()
            .map(|&b| {
                let r = self.meta.index_block_range(b);
                (b, r.end - r.start)
            })
            .collect();
        let (c, id) = (cache.clone(), self.id());
        let got = tokio::task::spawn_blocking(move || {
            lens.into_iter()
                .filter_map(|(b, len)| {
                    let whole = 0..len;
                    let bytes =
                        c.read(id, INDEX_FILE, b as u64, len, std::slice::from_ref(&whole))?;
                    Some((b, bytes.into_iter().next()?))
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Error::internal(format!("reading the cache did not complete: {e}")))?;
        let mut out = Vec::with_capacity(got.len());
        for (b, bytes) in got {
            match self.meta.check_index_block(b, bytes) {
                Ok(block) => out.push(block),
                Err(_) => cache.remove(self.id(), INDEX_FILE, b as u64),
            }
        }
        Ok(out)
    }

    /// Fetches the blocks `wanted` (sorted) from object storage, neighbours in
    /// one request up to the request size, and checks each.
    async fn fetch(&self, wanted: &[usize]) -> Result<Vec<Block>> {
        let most = self.fetcher.opts().max_request_bytes;
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &b in wanted {
            match runs.last_mut() {
                Some((first, last))
                    if *last + 1 == b
                        && self.meta.index_block_range(b).end
                            - self.meta.index_block_range(*first).start
                            <= most =>
                {
                    *last = b
                }
                _ => runs.push((b, b)),
            }
        }
        let got = futures::future::try_join_all(runs.iter().map(|&(first, last)| {
            let range =
                self.meta.index_block_range(first).start..self.meta.index_block_range(last).end;
            self.fetcher.get_range(INDEX_FILE, range)
        }))
        .await?;
        let mut out = Vec::with_capacity(wanted.len());
        for (&(first, last), bytes) in runs.iter().zip(got) {
            let base = self.meta.index_block_range(first).start;
            for b in first..=last {
                let r = self.meta.index_block_range(b);
                let piece = bytes.slice((r.start - base) as usize..(r.end - base) as usize);
                out.push(self.meta.check_index_block(b, piece)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks_of(dir: &std::path::Path) -> (Metadata<zrecord::NotFetched>, Vec<u8>) {
        let schema =
            zrecord::Schema::dense(zrecord::DType::U8, &[], zrecord::Codec::Raw, 1).unwrap();
        let store = dir.join("s");
        let mut w = zrecord::Writer::create(&store, schema, None).unwrap();
        let data = vec![7u8; 20_000];
        w.append_dense(20_000, &data, zrecord::Source::Memory, &zrecord::Sequential)
            .unwrap();
        w.finish().unwrap();
        let header = std::fs::read(store.join(zrecord::HEADER_FILE)).unwrap();
        let index = std::fs::read(store.join(INDEX_FILE)).unwrap();
        let parts = zrecord::Parts {
            index: zrecord::NotFetched {
                len: index.len() as u64,
            },
            index_sums: std::fs::read(store.join(zrecord::INDEX_SUMS_FILE)).unwrap(),
            dict: None,
            attrs: None,
        };
        let meta = Metadata::from_parts(
            std::path::Path::new("http://h/s"),
            &header,
            parts,
            zrecord::ReadOptions { checked: true },
        )
        .unwrap();
        (meta, index)
    }

    #[test]
    fn memory_keeps_the_most_recently_used_blocks_within_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let (meta, index) = blocks_of(dir.path());
        let block = |b: usize| {
            let r = meta.index_block_range(b);
            meta.check_index_block(
                b,
                Bytes::copy_from_slice(&index[r.start as usize..r.end as usize]),
            )
            .unwrap()
        };
        let bs = zrecord::INDEX_BLOCK_BYTES as u64;
        let mem = Memory::new(3 * bs);
        for b in 0..3 {
            mem.put(block(b));
        }
        assert_eq!(mem.held(), (3 * bs, 3));
        // Block 0 used last: block 1 goes first, then block 2.
        assert!(mem.get(0).is_some());
        mem.put(block(3));
        assert_eq!(mem.held(), (3 * bs, 3));
        assert!(mem.get(1).is_none());
        assert!(mem.get(0).is_some() && mem.get(2).is_some() && mem.get(3).is_some());
        mem.put(block(4));
        assert!(mem.get(0).is_none());
        assert_eq!(mem.held(), (3 * bs, 3));
        // The last block is shorter; a budget of zero keeps nothing.
        let last = meta.index_block_count() - 1;
        mem.put(block(last));
        assert_eq!(mem.held().1, 3);
        assert_eq!(
            mem.get(last).unwrap().bytes().len() as u64,
            480_000 - last as u64 * bs
        );
        let none = Memory::new(0);
        none.put(block(0));
        assert_eq!(none.held(), (0, 0));
    }
}
