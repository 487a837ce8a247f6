//! Blocks kept whole in this process's memory, so that a warm gather finds
//! them without a system call.
//!
//! Every opened cache keeps its own blocks ([`Memory`]), and all of them share
//! one budget ([`Pool`]). A cache that needs room takes it from the cache read
//! least lately if that one has not been read for `IDLE`, else from whichever
//! keeps the most, itself included: a reader left idle gives its memory up to
//! those in use, and two readers in use (a mixture, a concatenation) each end
//! up with their share. Had each cache made room only among its own blocks, a
//! cache opened after another had filled the budget could keep next to
//! nothing, and read a whole block from disk for every few records.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::Key;

/// Most bytes of blocks the caches of one process keep in memory.
const PROCESS_BYTES: u64 = 256 << 20;

static PROCESS: LazyLock<Arc<Pool>> = LazyLock::new(|| Pool::new(PROCESS_BYTES));

/// A memory not read for this long gives its blocks up before any other.
const IDLE: Duration = Duration::from_secs(1);

/// What the times of reads are counted from: well before the process's first
/// read, so that a time a while before it still counts.
static EPOCH: LazyLock<Instant> = LazyLock::new(|| {
    let now = Instant::now();
    now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
});

/// `at` in nanoseconds since `EPOCH` (0 before it).
fn since_epoch(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// A block kept in memory and when this process last refreshed its file's time.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) bytes: Bytes,
    pub(super) touched: Instant,
}

/// The budget the memories of a process's caches share.
#[derive(Debug)]
pub(super) struct Pool {
    limit: u64,
    /// Bytes kept by all its members.
    held: AtomicU64,
    members: Mutex<Vec<Weak<Memory>>>,
}

impl Pool {
    pub(super) fn new(limit: u64) -> Arc<Pool> {
        Arc::new(Pool {
            limit,
            held: AtomicU64::new(0),
            members: Mutex::new(Vec::new()),
        })
    }

    /// The pool of this process.
    pub(super) fn process() -> Arc<Pool> {
        PROCESS.clone()
    }

    /// A new, empty memory drawing on this pool.
    pub(super) fn member(self: &Arc<Pool>) -> Arc<Memory> {
        let m = Arc::new(Memory {
            pool: self.clone(),
            kept: Mutex::new(FxHashMap::default()),
            bytes: AtomicU64::new(0),
            released: AtomicU64::new(0),
            read_at: AtomicU64::new(since_epoch(Instant::now())),
        });
        let mut members = lock(&self.members);
        members.retain(|w| w.strong_count() > 0);
        members.push(Arc::downgrade(&m));
        m
    }

    fn has_room(&self, n: u64) -> bool {
        self.held.load(Ordering::Relaxed).saturating_add(n) <= self.limit
    }

    /// Lets go of one block of the member read least lately if it is idle,
    /// else of the member keeping the most; `false` if none keeps anything.
    fn release_one(&self) -> bool {
        let members: Vec<Arc<Memory>> = lock(&self.members)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        // Not under the members' lock: dropping the last reference to a
        // memory runs its drop here.
        let keeping = || {
            members
                .iter()
                .filter(|m| m.bytes.load(Ordering::Relaxed) > 0)
        };
        let idle_before = since_epoch(Instant::now()).saturating_sub(IDLE.as_nanos() as u64);
        let idle = keeping()
            .map(|m| (m.read_at.load(Ordering::Relaxed), m))
            .filter(|&(at, _)| at < idle_before)
            .min_by_key(|&(at, _)| at)
            .map(|(_, m)| m);
        idle.or_else(|| keeping().max_by_key(|m| m.bytes.load(Ordering::Relaxed)))
            .is_some_and(|m| m.release_any())
    }
}

/// The blocks one cache keeps in memory.
#[derive(Debug)]
pub(super) struct Memory {
    pool: Arc<Pool>,
    kept: Mutex<FxHashMap<Key, Kept>>,
    /// Bytes of `kept`.
    bytes: AtomicU64,
    /// How many blocks this memory has let go of, ever ([`Memory::released`]).
    released: AtomicU64,
    /// When a gather last read from it ([`Memory::read`]), in `since_epoch`'s
    /// nanoseconds.
    read_at: AtomicU64,
}

impl Memory {
    /// The blocks, under their lock.
    pub(super) fn lock(&self) -> MutexGuard<'_, FxHashMap<Key, Kept>> {
        lock(&self.kept)
    }

    /// Notes that a gather read from this memory at `now`, so that the pool
    /// takes room from idle memories first.
    pub(super) fn read(&self, now: Instant) {
        self.read_at.store(since_epoch(now), Ordering::Relaxed);
    }

    /// Whether `n` more bytes fit the pool without letting anything go.
    pub(super) fn has_room(&self, n: u64) -> bool {
        self.pool.has_room(n)
    }

    /// Keeps block `key` if the pool has room for it, or (with `evict`)
    /// once blocks of the members keeping the most are let go of to make it.
    pub(super) fn keep(&self, key: Key, bytes: Bytes, evict: bool) {
        let n = bytes.len() as u64;
        if self.lock().contains_key(&key) {
            return;
        }
        // One memory locked at a time, never this one while another is.
        while !self.pool.has_room(n) {
            if !evict || !self.pool.release_one() {
                return;
            }
        }
        let mut kept = self.lock();
        if kept.contains_key(&key) {
            return;
        }
        self.add(n);
        kept.insert(
            key,
            Kept {
                bytes,
                touched: Instant::now(),
            },
        );
    }

    /// Lets go of block `key` if kept.
    pub(super) fn forget(&self, key: &Key) {
        let old = self.lock().remove(key);
        if let Some(old) = old {
            self.let_go(old.bytes.len() as u64);
        }
    }

    /// Lets go of any one block (the map's order is as good as random, and
    /// random replacement does not thrash on a cyclic pattern as LRU would);
    /// `false` if none is kept.
    fn release_any(&self) -> bool {
        let mut kept = self.lock();
        let Some(k) = kept.keys().next().cloned() else {
            return false;
        };
        if let Some(old) = kept.remove(&k) {
            self.let_go(old.bytes.len() as u64);
        }
        true
    }

    /// How many blocks this memory has let go of, ever: a copy of the blocks
    /// it keeps taken when this read `n` holds only blocks it still keeps
    /// while this reads `n`. Relaxed: a gather that misses a release by a
    /// moment only reads a block a moment longer, whose bytes its copy holds.
    pub(super) fn released(&self) -> u64 {
        self.released.load(Ordering::Relaxed)
    }

    fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        self.pool.held.fetch_add(n, Ordering::Relaxed);
    }

    fn let_go(&self, n: u64) {
        self.released.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_sub(n, Ordering::Relaxed);
        self.pool.held.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        let n = *self.bytes.get_mut();
        self.pool.held.fetch_sub(n, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
