//! A remote store's index, fetched on demand: opening reads `index.sum` and no
//! part of `index.bin`; a read asks for the index blocks its records' entries
//! lie in, and each comes from this process's memory, from the block cache, or
//! from object storage, in that order. Every block that comes in from the cache
//! or the network is checked against `index.sum` before anything reads it
//! (the format crate's check, the one a local store makes); a block that fails
//! from the cache is dropped there and fetched again, one that fails from the
//! network is an error naming the store's index and the block. Concurrent
//! reads of one process fetch a missing block once: the others wait for it, as
//! they do for data blocks.
//!
//! Memory holds at most a budget of blocks between reads (least recently used
//! first out), so a process's memory for a store does not grow with its record
//! count; the blocks one read needs are held by that read until it ends, over
//! the budget if they must be.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use loaderx_gather::{Error, Result};
use zrecord::{CheckedBlock, HeldBlocks, HeldIndex, IndexSource, Metadata, Resolved, INDEX_FILE};

use crate::cache::Cache;
use crate::fetch::Fetcher;

/// Bytes of index blocks a store keeps in memory between reads unless the
/// `index_memory_bytes` storage option says otherwise: 4096 blocks, the entries
/// of about 11 million Dense records. A `WindowedSampler` window of the default
/// size (256 MiB of index and data together) has at most that much index, so a
/// pass walking it finds its entries in memory, at a cost that does not depend
/// on the store's size. At 64 MiB a window of tiny records (154 MiB of index)
/// pushed its blocks out before each came round again, and every step read
/// hundreds back from the cache (docs/benchmarks.md, "At scale").
pub const DEFAULT_INDEX_MEMORY_BYTES: u64 = 256 << 20;

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

struct Lru {
    held: HeldIndex<Bytes>,
    /// The count of uses (`tick`) at each block number's last use, read only
    /// for the blocks held: indexed by number, as a read of tiny records
    /// marks a block per record (four bytes a block, as the held set's table).
    last: Vec<u32>,
    tick: u32,
    bytes: u64,
}

impl Lru {
    /// The count of the use beginning now, the uses of held blocks renumbered
    /// in their order first once the count would overflow.
    fn next_tick(&mut self) -> u32 {
        if self.tick == u32::MAX {
            let by_age = self.by_age();
            for (t, &(_, b)) in (1..).zip(&by_age) {
                self.last[b] = t;
            }
            self.tick = by_age.len() as u32;
        }
        self.tick += 1;
        self.tick
    }

    /// The blocks held, by their last use and number, least recently used
    /// first.
    fn by_age(&self) -> Vec<(u32, usize)> {
        let mut by_age: Vec<(u32, usize)> =
            self.held.numbers().map(|b| (self.last[b], b)).collect();
        by_age.sort_unstable();
        by_age
    }

    /// Marks block `b` used at `tick`.
    #[inline]
    fn mark(&mut self, b: usize, tick: u32) {
        if let Some(t) = self.last.get_mut(b) {
            *t = tick;
        }
    }

    /// Block `b` if held, marked used now.
    #[inline]
    fn used(&mut self, b: usize) -> Option<Block> {
        let block = self.held.get(b).cloned()?;
        let tick = self.next_tick();
        self.mark(b, tick);
        Some(block)
    }

    /// Drops the least recently used blocks until `n` more bytes fit `budget`,
    /// and at least an eighth of the blocks: a use costs one store of its tick,
    /// and the order is found only here, once per many insertions.
    fn evict(&mut self, n: u64, budget: u64) {
        let by_age = self.by_age();
        let batch = by_age.len() / 8;
        for (k, (_, b)) in by_age.into_iter().enumerate() {
            if self.bytes + n <= budget && k >= batch {
                break;
            }
            if let Some(gone) = self.held.remove(b) {
                self.bytes -= gone.bytes().len() as u64;
            }
        }
    }
}

impl Memory {
    /// An empty memory of `budget` bytes for the index blocks of `meta`.
    pub fn new<I: IndexSource>(budget: u64, meta: &Metadata<I>) -> Memory {
        Memory {
            budget,
            inner: Mutex::new(Lru {
                held: HeldIndex::new(meta),
                last: Vec::new(),
                tick: 0,
                bytes: 0,
            }),
        }
    }

    /// Block `b` if memory holds it, marked used.
    pub fn get(&self, b: usize) -> Option<Block> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).used(b)
    }

    /// The records at `idx` of the store of `meta` resolved (checked entries
    /// and sizes), read from the blocks memory holds under one lock, each
    /// block used marked used; `None` if memory lacks any of them.
    pub fn entries<I: IndexSource>(
        &self,
        meta: &Metadata<I>,
        idx: &[u64],
    ) -> zrecord::Result<Option<Resolved>> {
        let mut lru = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(view) = meta.over_held(&lru.held) else {
            return Ok(None);
        };
        let Some(entries) = view.held_entries(idx)? else {
            return Ok(None);
        };
        let tick = lru.next_tick();
        for &i in idx {
            let (first, end) = meta.entry_blocks(i);
            lru.mark(first, tick);
            lru.mark(end, tick);
        }
        Ok(Some(entries))
    }

    /// Whether memory holds block `b`, without marking it used.
    pub fn contains(&self, b: usize) -> bool {
        let lru = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        lru.held.contains(b)
    }

    /// Keeps `block`, dropping the least recently used past the budget.
    pub fn put(&self, block: Block) {
        let n = block.bytes().len() as u64;
        if n > self.budget {
            return;
        }
        let mut lru = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let b = block.block();
        if lru.held.contains(b) {
            return;
        }
        if lru.bytes + n > self.budget {
            lru.evict(n, self.budget);
        }
        if lru.held.insert(block) {
            if lru.last.len() <= b {
                lru.last.resize(b + 1, 0);
            }
            let tick = lru.next_tick();
            lru.mark(b, tick);
            lru.bytes += n;
        }
    }

    /// Bytes of blocks held, and how many.
    #[cfg(test)]
    pub fn held(&self) -> (u64, usize) {
        let lru = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (lru.bytes, lru.held.len())
    }
}

/// The file number index blocks go by in the fetcher's table of blocks being
/// fetched, which no data file has (a store has at most 255).
pub(crate) const INDEX_KEY: usize = usize::MAX;

/// What fetches a store's index blocks: its metadata, fetcher, cache and memory.
pub(crate) struct Blocks<'a, I> {
    pub meta: &'a Metadata<I>,
    pub fetcher: &'a Fetcher,
    pub cache: Option<&'a Arc<Cache>>,
    pub memory: &'a Memory,
}

impl<I: IndexSource> Blocks<'_, I> {
    /// The blocks `needed` (sorted, each once), checked, in order. A block
    /// another read of this process is fetching meanwhile is waited for and
    /// then found in memory or the cache, not fetched twice.
    pub async fn get(&self, needed: &[usize], how: Use) -> Result<Vec<Block>> {
        let mut found: HashMap<usize, Block> = HashMap::with_capacity(needed.len());
        if how == Use::Verify {
            for block in self.fetch(needed, how).await? {
                found.insert(block.block(), block);
            }
            return collect(needed, found);
        }
        let (blocks, missing) = self.in_memory(needed);
        found.extend(blocks.into_iter().map(|b| (b.block(), b)));
        let claimed = self
            .fetcher
            .claim_blocks(missing.iter().map(|&b| (INDEX_KEY, b as u64)));
        let mine: Vec<usize> = claimed.keys().iter().map(|k| k.1 as usize).collect();
        // Read from the cache under the claim too: the reads of this process
        // that need the same blocks meanwhile wait and find them in memory,
        // rather than each reading every block from disk.
        let fetch_mine = async {
            let got = async {
                // Memory is looked at again: a read that had some of these
                // blocks may have finished between the first look and the claim.
                let (mut blocks, absent) = self.held(&mine, how).await?;
                let (fetched, theirs) = self.fetch_claimed(&absent, how).await?;
                blocks.extend(fetched);
                Ok::<_, Error>((blocks, theirs))
            }
            .await;
            claimed.release();
            got
        };
        let (mine, ()) = futures::join!(fetch_mine, async {
            for (_, done) in claimed.others() {
                // Closed when the other read's fetch ends, however it ends.
                let _ = done.acquire().await;
            }
        });
        let (mine, theirs) = mine?;
        for block in mine {
            found.insert(block.block(), block);
        }
        // Blocks another read of this process or another process fetched.
        let mut others: Vec<usize> = claimed.others().map(|(k, _)| k.1 as usize).collect();
        others.extend(theirs);
        others.sort_unstable();
        drop(claimed);
        if !others.is_empty() {
            // What the others fetched is in memory or the cache now, unless
            // their fetch failed or kept nothing: that is fetched here.
            let (blocks, still) = self.held(&others, how).await?;
            let fetched = self.fetch_and_keep(&still, how).await?;
            found.extend(blocks.into_iter().chain(fetched).map(|b| (b.block(), b)));
        }
        collect(needed, found)
    }

    /// The blocks of `wanted` that memory or the cache holds (a block from the
    /// cache kept in memory too, for a gather), and the others.
    async fn held(&self, wanted: &[usize], how: Use) -> Result<(Vec<Block>, Vec<usize>)> {
        let (mut blocks, missing) = self.in_memory(wanted);
        let (cached, absent) = self.in_cache(&missing, how).await?;
        blocks.extend(cached);
        Ok((blocks, absent))
    }

    /// The blocks of `wanted` that memory holds, and the others.
    fn in_memory(&self, wanted: &[usize]) -> (Vec<Block>, Vec<usize>) {
        let (mut blocks, mut missing) = (Vec::new(), Vec::new());
        for &b in wanted {
            match self.memory.get(b) {
                Some(block) => blocks.push(block),
                None => missing.push(b),
            }
        }
        (blocks, missing)
    }

    /// The blocks of `wanted` the cache holds (kept in memory too, for a
    /// gather), and the others.
    async fn in_cache(&self, wanted: &[usize], how: Use) -> Result<(Vec<Block>, Vec<usize>)> {
        let Some(cache) = self.cache.filter(|_| !wanted.is_empty()) else {
            return Ok((Vec::new(), wanted.to_vec()));
        };
        let blocks = self.read_cached(cache, wanted).await?;
        if how == Use::Gather {
            for block in &blocks {
                self.memory.put(block.clone());
            }
        }
        let got: std::collections::HashSet<usize> = blocks.iter().map(Block::block).collect();
        let absent = wanted
            .iter()
            .copied()
            .filter(|b| !got.contains(b))
            .collect();
        Ok((blocks, absent))
    }

    /// Fetches the blocks of `wanted` that no other process sharing the cache
    /// is fetching and the cache does not hold, and keeps them; returns them,
    /// and the others, once each is in the cache or no longer claimed.
    async fn fetch_claimed(&self, wanted: &[usize], how: Use) -> Result<(Vec<Block>, Vec<usize>)> {
        let Some(cache) = self.cache.filter(|_| !wanted.is_empty()) else {
            return Ok((self.fetch_and_keep(wanted, how).await?, Vec::new()));
        };
        let (c, id) = (cache.clone(), self.id());
        let named: Vec<(usize, String, u64, u64)> = wanted
            .iter()
            .map(|&b| {
                let r = self.meta.index_block_range(b);
                (b, INDEX_FILE.to_string(), b as u64, r.end - r.start)
            })
            .collect();
        let claims = tokio::task::spawn_blocking(move || c.claim_fetches(id, named))
            .await
            .map_err(|e| Error::internal(format!("claiming index blocks did not complete: {e}")))?;
        let waits: Vec<(String, u64, u64)> = claims
            .theirs
            .iter()
            .map(|&b| {
                let r = self.meta.index_block_range(b);
                (INDEX_FILE.to_string(), b as u64, r.end - r.start)
            })
            .collect();
        let (held, mine) = (claims.held, claims.mine);
        let (got, ()) = futures::join!(
            async {
                let got = self.fetch_and_keep(&mine, how).await;
                // Written (or failed): waiters read it, or fetch it themselves.
                drop(held);
                got
            },
            cache.wait_for_claimed(id, &waits, self.fetcher.claim_wait_until())
        );
        let mut theirs = claims.theirs;
        theirs.extend(claims.kept);
        Ok((got?, theirs))
    }

    /// Fetches `wanted` and keeps the blocks in the cache and, for a gather, in
    /// memory.
    async fn fetch_and_keep(&self, wanted: &[usize], how: Use) -> Result<Vec<Block>> {
        let fetched = self.fetch(wanted, how).await?;
        if let (Some(cache), false) = (self.cache, fetched.is_empty()) {
            let (c, id) = (cache.clone(), self.id());
            let kept: Vec<Block> = fetched.clone();
            tokio::task::spawn_blocking(move || {
                c.put_blocks(
                    id,
                    kept.iter()
                        .map(|b| (INDEX_FILE, b.block() as u64, b.bytes())),
                );
            })
            .await
            .map_err(|e| Error::internal(format!("writing the cache did not complete: {e}")))?;
        }
        if how == Use::Gather {
            for block in &fetched {
                self.memory.put(block.clone());
            }
        }
        Ok(fetched)
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
                .filter_map(|(b, len)| Some((b, c.read_whole(id, INDEX_FILE, b as u64, len)?)))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Error::internal(format!("reading the cache did not complete: {e}")))?;
        let mut out = Vec::with_capacity(got.len());
        for (b, bytes) in got {
            self.fetcher.traffic.add_from_cache(bytes.len());
            match self.meta.check_index_block(b, bytes) {
                Ok(block) => out.push(block),
                Err(_) => cache.remove(self.id(), INDEX_FILE, b as u64),
            }
        }
        Ok(out)
    }

    /// Fetches the blocks `wanted` (sorted) from object storage, neighbours in
    /// one request up to the request size, and checks each.
    async fn fetch(&self, wanted: &[usize], how: Use) -> Result<Vec<Block>> {
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
                let at = (r.start - base) as usize..(r.end - base) as usize;
                // A gather's blocks are kept in memory: a copy of its own is
                // better in a huge page, and holds no more of the response
                // than itself. A scan's or a verify's are not kept.
                let piece = match how {
                    Use::Gather => crate::huge::copied(&bytes[at.clone()]),
                    Use::Scan | Use::Verify => None,
                }
                .unwrap_or_else(|| bytes.slice(at));
                out.push(self.meta.check_index_block(b, piece)?);
            }
        }
        Ok(out)
    }
}

/// The blocks of `needed`, in order, from `found`.
fn collect(needed: &[usize], mut found: HashMap<usize, Block>) -> Result<Vec<Block>> {
    needed
        .iter()
        .map(|b| {
            found
                .remove(b)
                .ok_or_else(|| Error::internal(format!("index block {b} was not read")))
        })
        .collect()
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

    /// Index block `b` of `index`, checked against `meta`'s `index.sum`.
    fn checked_block(meta: &Metadata<zrecord::NotFetched>, index: &[u8], b: usize) -> Block {
        let r = meta.index_block_range(b);
        meta.check_index_block(
            b,
            Bytes::copy_from_slice(&index[r.start as usize..r.end as usize]),
        )
        .unwrap()
    }

    /// A store's index (kept with its directory) and a memory of three
    /// blocks' budget holding blocks 0, 1 and 2, used in that order.
    fn three_blocks_held() -> (
        tempfile::TempDir,
        Metadata<zrecord::NotFetched>,
        Vec<u8>,
        Memory,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (meta, index) = blocks_of(dir.path());
        let mem = Memory::new(3 * zrecord::INDEX_BLOCK_BYTES as u64, &meta);
        for b in 0..3 {
            mem.put(checked_block(&meta, &index, b));
        }
        (dir, meta, index, mem)
    }

    #[test]
    fn memory_keeps_the_most_recently_used_blocks_within_its_budget() {
        let (_dir, meta, index, mem) = three_blocks_held();
        let block = |b: usize| checked_block(&meta, &index, b);
        let bs = zrecord::INDEX_BLOCK_BYTES as u64;
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
        let none = Memory::new(0, &meta);
        none.put(block(0));
        assert_eq!(none.held(), (0, 0));
    }

    #[test]
    fn uses_keep_their_order_when_the_count_of_uses_runs_out() {
        let (_dir, meta, index, mem) = three_blocks_held();
        let block = |b: usize| checked_block(&meta, &index, b);
        // Used 2, then 0, then 1, the count of uses running out in between.
        mem.inner.lock().unwrap().tick = u32::MAX - 1;
        assert!(mem.get(2).is_some());
        assert!(mem.get(0).is_some());
        assert_eq!(
            mem.inner.lock().unwrap().tick,
            4,
            "three renumbered, then this use"
        );
        assert!(mem.get(1).is_some());
        // Least recently used first out: 2, then 0.
        mem.put(block(3));
        assert!(mem.get(2).is_none() && mem.get(0).is_some());
        mem.put(block(4));
        assert!(mem.get(1).is_none() && mem.get(0).is_some() && mem.get(3).is_some());
    }

    #[test]
    fn entries_are_resolved_from_held_blocks_and_mark_them_used() {
        let (dir, meta, index, mem) = three_blocks_held();
        let local = zrecord::Metadata::from_parts(
            std::path::Path::new("http://h/s"),
            &std::fs::read(dir.path().join("s").join(zrecord::HEADER_FILE)).unwrap(),
            zrecord::Parts {
                index: index.clone(),
                index_sums: std::fs::read(dir.path().join("s").join(zrecord::INDEX_SUMS_FILE))
                    .unwrap(),
                dict: None,
                attrs: None,
            },
            zrecord::ReadOptions { checked: true },
        )
        .unwrap();
        // 24-byte entries: position 5000 lies in block 1, 10 in block 0.
        let got = mem.entries(&meta, &[5000, 10]).unwrap().unwrap();
        assert_eq!(got.entries, local.entries(&[5000, 10]).unwrap());
        assert_eq!(got, local.held_entries(&[5000, 10]).unwrap().unwrap());
        assert!(
            mem.entries(&meta, &[10, 9000]).unwrap().is_none(),
            "block 3"
        );
        // Blocks 1 and 0 were used after block 2, which goes first.
        mem.put(checked_block(&meta, &index, 3));
        assert!(mem.get(2).is_none() && mem.get(0).is_some() && mem.get(1).is_some());
    }
}
