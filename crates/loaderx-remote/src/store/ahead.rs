//! Read-ahead: the blocks of records a Loader will gather a few steps from
//! now, fetched in the background through the paths a gather fetches by (index
//! blocks checked into memory and the cache, data blocks into the cache), so
//! that the gather finds them there. Nothing here decides what a gather
//! returns: a gather checks every record as it always does, wherever its bytes
//! came from.
//!
//! What is held ahead is bounded: the bytes of blocks fetched ahead and not yet
//! used by a gather stay within the store's budget (the storage option
//! `read_ahead_bytes`, held to a quarter of the cache). Blocks are reserved in
//! the order the steps were warmed, so that a nearer step is never dropped for
//! a farther one. Its requests share the store's budget of requests in flight,
//! and [`RemoteStore::cancel_warm`] stops them.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};

use loaderx_gather::{Error, Result};
use rustc_hash::FxHashMap;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;
use zrecord::{data_file, INDEX_FILE};

use super::{RemoteStore, Source};
use crate::cache::Cache;
use crate::fetch::{plan_requests, BlockKey};
use crate::index::{Use, INDEX_KEY};
use crate::runtime::{pid, spawn};

/// A store's read-ahead: its budget and what it holds.
pub(crate) struct Ahead {
    /// Most bytes of blocks fetched ahead and not yet used; zero reads nothing
    /// ahead.
    budget: u64,
    /// Whether data blocks are read ahead (into the cache), not only index
    /// blocks (into memory).
    data: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The process the state belongs to: a forked child starts afresh.
    pid: u32,
    /// Blocks fetched (or being fetched) ahead and not yet used by a gather,
    /// with their bytes.
    held: FxHashMap<BlockKey, u64>,
    /// The sum of `held`.
    bytes: u64,
    /// Counts cancels: a warm begun before the last one reserves nothing.
    generation: u64,
    tasks: Vec<AbortHandle>,
    /// Closed once the last warm begun has reserved its data blocks; the
    /// next one waits for it.
    last: Option<oneshot::Receiver<()>>,
    /// Warms in a row that found every block held already, up to
    /// [`MOST_IDLE`]: a warm then covers `2^idle` steps, the one it warms and
    /// those after it, so that a pass over a cache that holds it costs next
    /// to nothing.
    idle: u32,
    /// Warms begun and not ended.
    running: usize,
}

/// After this many warms in a row found nothing to fetch, one warm in
/// `2^MOST_IDLE` is begun: about one per step the Loader reads ahead.
const MOST_IDLE: u32 = 6;

/// Most warms running at once. Steps of one window share most of their
/// blocks, so the first few warms of a window reserve nearly all it needs and
/// the rest find them reserved; without a bound, a Loader starting over a
/// cache that holds its blocks began one warm per step read ahead (512), all
/// finding nothing, on the cores its first steps needed.
const MOST_RUNNING: usize = 32;

/// What a call of [`RemoteStore::warm`] does, decided under the state's lock.
#[derive(Debug, PartialEq, Eq)]
enum Turn {
    /// Nothing now: the budget is full, enough warms run already, or the
    /// last warm to end found everything held and those still running will
    /// tell whether that holds. The caller asks again later, for the same
    /// step.
    Refuse,
    /// Begin a warm of this step, which covers the next `n - 1` too.
    Begin(u64),
}

impl State {
    fn turn(&self, budget: u64) -> Turn {
        let covers = 1u64 << self.idle;
        if self.bytes >= budget
            || (self.idle > 0 && self.running > 0)
            || self.running >= MOST_RUNNING
        {
            Turn::Refuse
        } else {
            Turn::Begin(covers)
        }
    }
}

impl Ahead {
    pub fn new(budget: u64, data: bool) -> Ahead {
        Ahead {
            budget,
            data,
            state: Mutex::new(State {
                pid: pid(),
                ..State::default()
            }),
        }
    }

    /// The state, reset first in a forked child: the parent's tasks and the
    /// blocks it held ahead are not this process's.
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.pid != pid() {
            // Forgotten, not dropped: they point into the parent's runtime.
            std::mem::forget(std::mem::take(&mut s.tasks));
            std::mem::forget(s.last.take());
            let generation = s.generation + 1;
            *s = State {
                pid: pid(),
                generation,
                ..State::default()
            };
        }
        s
    }

    /// Bytes of blocks fetched ahead and not yet used, and how many blocks.
    #[cfg(test)]
    pub fn held(&self) -> (u64, usize) {
        let s = self.state();
        (s.bytes, s.held.len())
    }

    /// Reserves the blocks of `keys` (with their bytes) not reserved already,
    /// in order, while they fit the budget; returns those it reserved, and
    /// whether every one fitted. A warm begun before a cancel reserves nothing.
    fn reserve(
        &self,
        generation: u64,
        keys: impl IntoIterator<Item = (BlockKey, u64)>,
    ) -> (Vec<BlockKey>, bool) {
        let mut s = self.state();
        if s.generation != generation {
            return (Vec::new(), false);
        }
        let mut taken = Vec::new();
        for (k, len) in keys {
            if s.held.contains_key(&k) {
                continue;
            }
            if s.bytes.saturating_add(len) > self.budget {
                return (taken, false);
            }
            s.held.insert(k, len);
            s.bytes += len;
            taken.push(k);
        }
        (taken, true)
    }

    /// Whether block `key` is reserved: a warm or a gather's fetch behind it
    /// is about to fetch it, if it has not begun.
    fn reserved(&self, key: &BlockKey) -> bool {
        self.state().held.contains_key(key)
    }

    /// Forgets the blocks of `keys` a warm of `generation` reserved and did
    /// not fetch.
    fn release(&self, generation: u64, keys: impl IntoIterator<Item = BlockKey>) {
        let mut s = self.state();
        if s.generation == generation {
            forget(&mut s, keys);
        }
    }

    /// Keeps `task`, begun for `generation`, to be stopped by the next
    /// cancel; stops it now if a cancel came since it was begun.
    fn track<T>(&self, generation: u64, task: &tokio::task::JoinHandle<T>) {
        let mut s = self.state();
        s.tasks.retain(|t| !t.is_finished());
        if s.generation == generation {
            s.tasks.push(task.abort_handle());
        } else {
            task.abort();
        }
    }

    /// Notes whether a warm found anything to fetch.
    fn found(&self, work: bool) {
        let mut s = self.state();
        s.idle = if work { 0 } else { (s.idle + 1).min(MOST_IDLE) };
    }

    /// Notes that a warm of `generation` has ended, however it ended.
    fn ended(&self, generation: u64) {
        let mut s = self.state();
        if s.generation == generation {
            s.running = s.running.saturating_sub(1);
        }
    }

    /// Frees the budget of the blocks of `keys` a gather used.
    pub fn used(&self, keys: impl IntoIterator<Item = BlockKey>) {
        if self.budget > 0 {
            forget(&mut self.state(), keys);
        }
    }

    /// Stops every warm begun and frees the whole budget.
    pub fn cancel(&self) {
        let mut s = self.state();
        for t in s.tasks.drain(..) {
            t.abort();
        }
        s.held.clear();
        s.bytes = 0;
        s.last = None;
        s.running = 0;
        s.generation += 1;
    }
}

fn forget(s: &mut State, keys: impl IntoIterator<Item = BlockKey>) {
    if s.held.is_empty() {
        return;
    }
    for k in keys {
        if let Some(len) = s.held.remove(&k) {
            s.bytes -= len;
        }
    }
}

/// The budget a store reads ahead within: the storage option, held to a
/// quarter of the cache (blocks read ahead must outlive the wait for their
/// gather), or, without a cache, to half the memory kept for index blocks,
/// which are then all it reads ahead.
pub(super) fn budget(option: u64, cache: Option<&Cache>, index_memory: u64) -> u64 {
    match cache {
        Some(c) => option.min(c.max_bytes() / 4),
        None => option.min(index_memory / 2),
    }
}

impl RemoteStore {
    /// Begins fetching, in the background, the index blocks and (with a cache)
    /// the data blocks the records at `idx` lie in, and returns at once. Only
    /// blocks neither memory nor the cache holds are fetched, and only while
    /// the blocks fetched ahead and not yet used fit the budget. Returns how
    /// many steps the call covers, this one first: 0 says nothing was begun
    /// (the budget is full, enough warms run, or the last warm to end found
    /// everything held and those still running will tell whether that
    /// holds) and the caller asks again later; `n > 1` that the warms before
    /// found everything held, so the caller need not warm the next `n - 1`
    /// steps either. Positions that are
    /// not the store's are left for the gather to refuse. Whatever fails is
    /// dropped: the gather that needs the block fetches it, and reports the
    /// failure.
    pub fn warm(&self, idx: &[u64]) -> Result<u64> {
        let ahead = &self.0.ahead;
        let on_demand = self.on_demand();
        if ahead.budget == 0 || (!on_demand && !ahead.data) {
            return Ok(1);
        }
        let (generation, covers) = {
            let s = ahead.state();
            match s.turn(ahead.budget) {
                Turn::Refuse => return Ok(0),
                Turn::Begin(n) => (s.generation, n),
            }
        };
        Ok(if self.begin_warm(generation, idx)? {
            covers
        } else {
            0
        })
    }

    /// Begins the warm of `idx` that [`Ahead`] allowed; `false` if its index
    /// blocks do not fit the budget and nothing was begun.
    fn begin_warm(&self, generation: u64, idx: &[u64]) -> Result<bool> {
        let ahead = &self.0.ahead;
        let meta = &self.0.meta;
        let Ok(blocks) = meta.index_blocks(idx) else {
            // Nothing to warm: the gather refuses these positions.
            return Ok(true);
        };
        let mut not_in_memory = Vec::new();
        let needed = if self.on_demand() {
            let missing = blocks
                .iter()
                .filter(|&&b| !self.0.index.contains(b))
                .map(|&b| {
                    let r = meta.index_block_range(b);
                    ((INDEX_KEY, b as u64), r.end - r.start)
                });
            let (taken, all) = ahead.reserve(generation, missing);
            if !all {
                ahead.release(generation, taken);
                return Ok(false);
            }
            not_in_memory = taken;
            Some(blocks)
        } else {
            None
        };
        let source = self.source()?;
        let (store, ids) = (self.clone(), idx.to_vec());
        let (mine, next) = oneshot::channel::<()>();
        let prev = {
            let mut s = ahead.state();
            s.running += 1;
            s.last.replace(next)
        };
        let task = spawn(async move {
            // Failures are the gather's to report: it fetches what this did not.
            let _ = store
                .warm_task(source, generation, (needed, not_in_memory), ids, prev, mine)
                .await;
            store.0.ahead.ended(generation);
            Ok(())
        })
        .inspect_err(|_| ahead.ended(generation))?;
        ahead.track(generation, &task);
        Ok(true)
    }

    /// Stops the warms begun and frees their budget; what they fetched stays
    /// in memory and the cache.
    pub fn cancel_warm(&self) {
        self.0.ahead.cancel();
    }

    async fn warm_task(
        &self,
        source: Source,
        generation: u64,
        (needed, not_in_memory): (Option<Vec<usize>>, Vec<BlockKey>),
        ids: Vec<u64>,
        prev: Option<oneshot::Receiver<()>>,
        mine: oneshot::Sender<()>,
    ) -> Result<()> {
        let ahead = &self.0.ahead;
        let fetcher = source.fetcher.clone();
        // Index blocks memory lacks that the cache lacks too: to be fetched.
        let index_to_fetch = match (&source.cache, not_in_memory.is_empty()) {
            (_, true) => false,
            (None, false) => true,
            (Some(cache), false) => {
                let (c, id, meta) = (cache.clone(), source.id, self.clone());
                tokio::task::spawn_blocking(move || {
                    not_in_memory.iter().any(|&(_, b)| {
                        let r = meta.0.meta.index_block_range(b as usize);
                        !c.holds(id, INDEX_FILE, b, r.end - r.start)
                    })
                })
                .await
                .unwrap_or(true)
            }
        };
        let index_keys: Vec<BlockKey> = needed
            .iter()
            .flatten()
            .map(|&b| (INDEX_KEY, b as u64))
            .collect();
        let ahead_of = fetcher.clone();
        ahead_of
            .ahead(fetcher.bounded(async {
                let view = match self.view(&fetcher, needed, Use::Gather).await {
                    Ok(v) => v,
                    Err(e) => {
                        ahead.release(generation, index_keys);
                        return Err(e);
                    }
                };
                let Some(cache) = source.cache.clone().filter(|_| ahead.data) else {
                    ahead.found(index_to_fetch);
                    return Ok(());
                };
                let entries = match &view {
                    Some(v) => v.entries(&ids)?,
                    None => self.0.meta.entries(&ids)?,
                };
                let bs = cache.block_bytes();
                let requests = plan_requests(
                    &entries,
                    source.sizes.len(),
                    0,
                    fetcher.opts().max_request_bytes,
                );
                let mut touched = BTreeSet::new();
                for r in &requests {
                    touched
                        .extend((r.range.start / bs..=(r.range.end - 1) / bs).map(|b| (r.file, b)));
                }
                let lens: Vec<(BlockKey, u64)> = touched
                    .into_iter()
                    .map(|(f, b)| ((f, b), source.block_len(bs, f, b)))
                    .collect();
                let (c, id) = (cache.clone(), source.id);
                let missing = tokio::task::spawn_blocking(move || {
                    lens.into_iter()
                        .filter(|&((f, b), len)| !c.holds(id, &data_file(f), b, len))
                        .collect::<Vec<_>>()
                })
                .await
                .map_err(|e| Error::internal(format!("reading the cache did not complete: {e}")))?;
                ahead.found(index_to_fetch || !missing.is_empty());
                if let Some(p) = prev {
                    // Ends when the warm begun before this one has reserved, or
                    // has stopped.
                    let _ = p.await;
                }
                let (reserved, _) = ahead.reserve(generation, missing);
                drop(mine);
                source
                    .warm_blocks(&cache, ahead, generation, reserved)
                    .await
            }))
            .await
    }
}

/// A gather's missing blocks of which it uses less than one byte in
/// `SPARSE_USE` are left to come behind it ([`Source::take_sparse`]), once
/// there are at least `SPARSE_MIN_BYTES` of them: under that, fetching them
/// whole costs the gather little more than its own bytes would.
const SPARSE_USE: u64 = 16;
const SPARSE_MIN_BYTES: u64 = 8 << 20;

impl Source {
    /// Takes from `missing` (blocks the cache lacks, with the parts of them a
    /// gather needs) the blocks the gather is not to wait for: those it uses
    /// little of and nothing in this process is fetching, when there are
    /// enough of them, and read-ahead may fetch them whole behind it
    /// ([`Source::fetch_behind`]).
    pub(super) fn take_sparse(
        &self,
        missing: &mut BTreeMap<BlockKey, Vec<Range<u64>>>,
        bs: u64,
    ) -> BTreeMap<BlockKey, Vec<Range<u64>>> {
        if self.ahead.budget == 0 || !self.ahead.data {
            return BTreeMap::new();
        }
        let sparse: Vec<(BlockKey, u64)> = missing
            .iter()
            .map(|(&(f, b), parts)| {
                let used: u64 = parts.iter().map(|r| r.end - r.start).sum();
                ((f, b), used, self.block_len(bs, f, b))
            })
            .filter(|&(_, used, len)| used.saturating_mul(SPARSE_USE) < len)
            // One on its way whole (or reserved to be: its request follows
            // at once) is waited for: it comes in about the time a request
            // for the parts would.
            .filter(|(k, _, _)| !self.fetcher.in_flight(k) && !self.ahead.reserved(k))
            .map(|(k, _, len)| (k, len))
            .collect();
        if sparse.iter().map(|&(_, len)| len).sum::<u64>() < SPARSE_MIN_BYTES {
            return BTreeMap::new();
        }
        sparse
            .into_iter()
            .filter_map(|(k, _)| missing.remove_entry(&k))
            .collect()
    }

    /// Fetches the data blocks `keys` whole into the cache in the background,
    /// as read-ahead does (within its budget while they are on their way, its
    /// requests yielding to gathers', stopped by [`RemoteStore::cancel_warm`]),
    /// for a gather that took only its own bytes of them.
    pub(super) fn fetch_behind(&self, cache: &Arc<Cache>, keys: impl Iterator<Item = BlockKey>) {
        let cache = cache.clone();
        let ahead = &self.ahead;
        let generation = ahead.state().generation;
        let bs = cache.block_bytes();
        let lens = keys.map(|(f, b)| ((f, b), self.block_len(bs, f, b)));
        let (reserved, _) = ahead.reserve(generation, lens);
        if reserved.is_empty() {
            return;
        }
        let (source, taken) = (self.clone(), reserved.clone());
        let task = spawn(async move {
            let fetcher = source.fetcher.clone();
            // Failures are dropped: a gather that needs the block fetches it.
            let _ = fetcher
                .ahead(fetcher.bounded(source.warm_blocks(
                    &cache,
                    &source.ahead,
                    generation,
                    taken.clone(),
                )))
                .await;
            // Held against the budget only while on their way: no gather may
            // ever use them (random gathers over a large store), and
            // read-ahead's own blocks must not wait for that.
            source.ahead.release(generation, taken);
            Ok(())
        });
        match task {
            Ok(task) => ahead.track(generation, &task),
            Err(_) => ahead.release(generation, reserved),
        }
    }

    /// Fetches the data blocks `keys` (sorted) into the cache, as a gather
    /// fetches its missing blocks; those a gather of this process or another
    /// process sharing the cache is fetching are left to it.
    async fn warm_blocks(
        &self,
        cache: &Arc<Cache>,
        ahead: &Ahead,
        generation: u64,
        keys: Vec<BlockKey>,
    ) -> Result<()> {
        let claimed = self.fetcher.claim_blocks(keys.iter().copied());
        ahead.release(generation, claimed.others().map(|(k, _)| k));
        let got = self.fetch_claimed(cache, claimed.keys()).await;
        claimed.release();
        match got {
            Ok((_, theirs)) => {
                ahead.release(generation, theirs);
                Ok(())
            }
            Err(e) => {
                ahead.release(generation, claimed.keys().iter().copied());
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_budget_in_order_and_a_cancel_frees_them() {
        let ahead = Ahead::new(10, true);
        let (taken, all) = ahead.reserve(0, [((0, 0), 4), ((0, 1), 4), ((0, 2), 4), ((0, 3), 1)]);
        // The third does not fit; nothing after it is taken either.
        assert_eq!((taken, all), (vec![(0, 0), (0, 1)], false));
        assert_eq!(ahead.held(), (8, 2));
        // Reserved already: not counted twice.
        assert_eq!(
            ahead.reserve(0, [((0, 1), 4), ((0, 3), 2)]),
            (vec![(0, 3)], true)
        );
        assert_eq!(ahead.held(), (10, 3));
        ahead.used([(0, 0), (9, 9)]);
        assert_eq!(ahead.held(), (6, 2));
        ahead.cancel();
        assert_eq!(ahead.held(), (0, 0));
        // A warm begun before the cancel neither reserves nor releases.
        assert_eq!(ahead.reserve(0, [((0, 5), 1)]), (vec![], false));
        assert_eq!(ahead.reserve(1, [((0, 5), 1)]), (vec![(0, 5)], true));
        ahead.release(0, [(0, 5)]);
        assert_eq!(ahead.held(), (1, 1));
        ahead.release(1, [(0, 5)]);
        assert_eq!(ahead.held(), (0, 0));
    }

    #[test]
    fn warms_that_found_nothing_cover_more_steps_and_let_one_run_at_a_time() {
        let ahead = Ahead::new(10, true);
        let turn = |a: &Ahead| a.state().turn(10);
        let run = |a: &Ahead| a.state().running += 1;
        // Warms begin, a step each, until MOST_RUNNING run; the next step is
        // refused, to be asked again, not skipped.
        for _ in 0..MOST_RUNNING {
            assert_eq!(turn(&ahead), Turn::Begin(1));
            run(&ahead);
        }
        assert_eq!(turn(&ahead), Turn::Refuse);
        ahead.ended(0);
        assert_eq!(turn(&ahead), Turn::Begin(1));
        // Once one found everything held, the next step waits for the warms
        // still running to tell whether that holds: a caller asking again at
        // once is refused each time, not told to skip steps it then never
        // warms (a slow warm let a Loader skip half of its 512 steps ahead).
        ahead.found(false);
        for _ in 0..3 {
            assert_eq!(turn(&ahead), Turn::Refuse);
        }
        for _ in 0..MOST_RUNNING - 1 {
            ahead.ended(0);
        }
        assert_eq!(turn(&ahead), Turn::Begin(2));
        for _ in 0..10 {
            ahead.found(false);
        }
        assert_eq!(turn(&ahead), Turn::Begin(1 << MOST_IDLE));
        // One warm that finds work warms every step again.
        ahead.found(true);
        run(&ahead);
        assert_eq!(turn(&ahead), Turn::Begin(1));
        // A cancel forgets the running warms; one of before it ending counts
        // nothing.
        ahead.cancel();
        assert_eq!(ahead.state().running, 0);
        run(&ahead);
        ahead.ended(0);
        assert_eq!(ahead.state().running, 1);
        // A full budget refuses before anything else.
        assert_eq!(ahead.state().turn(0), Turn::Refuse);
    }

    #[test]
    fn the_budget_is_held_to_the_cache_or_the_index_memory() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 400, 1 << 20).unwrap();
        assert_eq!(budget(1000, Some(&cache), 0), 100);
        assert_eq!(budget(50, Some(&cache), 0), 50);
        assert_eq!(budget(1000, None, 300), 150);
    }
}
