//! The helper threads behind every parallel gather and write.
//!
//! A call splits its work into parts and publishes them; the calling thread and
//! any idle helper claim parts one at a time from a shared counter. The caller
//! never waits for a helper to *start*: parts nobody claimed yet it runs itself,
//! and it only waits for parts a helper is already running. On a busy two-core
//! machine that matters more than anything else here: a descheduled helper costs
//! nothing, where a fork-join pool would block the caller until it ran.
//!
//! Helpers spin briefly after a job before parking, so back-to-back batches are
//! picked up without a wake-up system call. The pool is rebuilt the first time a
//! forked child uses it (the child inherits the bookkeeping but not the threads).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use zrecord::{Error, Parallel, Result};

/// How long an idle helper keeps looking for the next job before it parks.
const SPIN: Duration = Duration::from_micros(50);

/// Spins until `ready()` holds or [`SPIN`] has passed, and says whether it
/// holds: a thread about to park looks a little longer first, since waking a
/// parked thread costs more than a small job.
pub(crate) fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if ready() {
            return true;
        }
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 {
            if start.elapsed() >= SPIN {
                return false;
            }
            // Lets a thread waiting for this core run: with more threads than
            // cores, one that spins without yielding delays the very work it
            // waits for.
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Threads that work on one call, the caller included; 0 until first asked.
static THREAD_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Threads that work on one call, the caller included: what [`set_threads`]
/// set, else `LOADERX_NUM_THREADS`, else the machine's available parallelism.
/// Decided once per process unless set: asking the OS reads cgroup files, which
/// costs more than a small gather.
pub fn parallelism() -> usize {
    let n = THREAD_COUNT.load(Ordering::Relaxed);
    if n != 0 {
        return n;
    }
    let n = std::env::var("LOADERX_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    match THREAD_COUNT.compare_exchange(0, n, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => n,
        Err(set) => set,
    }
}

/// Most threads one call may be given.
pub const MAX_THREADS: usize = 1024;

/// Sets how many threads work on one call, the caller included (1 runs every
/// call on its caller alone), overriding `LOADERX_NUM_THREADS`. Calls that start
/// afterwards use it: fewer threads park the helpers beyond the count, more
/// start helpers as the next parallel call needs them. A call already running
/// keeps the threads it has.
pub fn set_threads(n: usize) -> Result<()> {
    if !(1..=MAX_THREADS).contains(&n) {
        return Err(Error::InvalidArgument(format!(
            "the thread count must be in 1..={MAX_THREADS}, got {n}"
        )));
    }
    THREAD_COUNT.store(n, Ordering::Relaxed);
    let current = lock(&POOL)
        .as_ref()
        .filter(|(owner, _)| *owner == std::process::id())
        .map(|(_, shared)| shared.clone());
    if let Some(shared) = current {
        // Under the slot lock, which a parked surplus helper checks its count
        // under, so that no helper misses the change.
        let _slot = lock(&shared.slot);
        shared.resized.notify_all();
    }
    Ok(())
}

/// How many parts to split `units` of work into, given the smallest part worth a
/// thread hand-off.
pub fn part_count(units: usize, min_units_per_part: usize) -> usize {
    let by_size = units / min_units_per_part.max(1);
    by_size.clamp(1, parallelism())
}

/// Output bytes each part of a raw gather must have before the gather is split
/// across threads: below this a hand-off costs more than the copy it shares.
const MIN_PART_BYTES: usize = 128 << 10;
/// The same for compressed records, whose decoding costs far more per byte.
const MIN_PART_BYTES_DECODED: usize = 16 << 10;

/// The engine's threads, as the format crate's [`Parallel`].
#[derive(Clone, Copy, Debug)]
pub struct Threads;

/// The one handle to this process's helper threads.
pub static THREADS: Threads = Threads;

impl Parallel for Threads {
    fn parts(&self, bytes: usize, decodes: bool) -> usize {
        let min = if decodes {
            MIN_PART_BYTES_DECODED
        } else {
            MIN_PART_BYTES
        };
        part_count(bytes, min)
    }

    fn run(&self, n: usize, task: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()> {
        run_parts((0..n).collect(), task)
    }
}

/// A published job: a claim loop that any thread may run, and how many helpers
/// are inside it.
struct Job {
    run: *const (dyn Fn() + Sync),
    active: AtomicUsize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct JobPtr(*const Job);
// SAFETY: a JobPtr is only dereferenced by a helper that joined the job under the
// slot lock; the publishing caller keeps the job alive until every joined helper
// has left (see `run_parts`).
unsafe impl Send for JobPtr {}

struct Shared {
    slot: Mutex<Option<JobPtr>>,
    wake: Condvar,
    generation: AtomicU64,
    parked: AtomicUsize,
    /// Where helpers beyond the thread count wait for it to grow.
    resized: Condvar,
    /// Helpers started, numbered `0..started`; changed under the pool's lock.
    started: AtomicUsize,
}

static POOL: Mutex<Option<(u32, Arc<Shared>)>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Helpers a call may have beside its caller.
fn helpers_wanted() -> usize {
    parallelism().saturating_sub(1)
}

/// This process's pool, with as many helpers as the thread count asks for
/// started, or None when there are no helpers to have.
fn pool() -> Option<Arc<Shared>> {
    let wanted = helpers_wanted();
    if wanted == 0 {
        return None;
    }
    let pid = std::process::id();
    let mut guard = lock(&POOL);
    let shared = match guard.as_ref() {
        Some((owner, shared)) if *owner == pid => shared.clone(),
        _ => {
            // Inherited through fork: no threads behind it. Forget it rather
            // than drop it, in case a lock inside was held at the fork.
            if let Some(old) = guard.take() {
                std::mem::forget(old);
            }
            let shared = Arc::new(Shared {
                slot: Mutex::new(None),
                wake: Condvar::new(),
                generation: AtomicU64::new(0),
                parked: AtomicUsize::new(0),
                resized: Condvar::new(),
                started: AtomicUsize::new(0),
            });
            *guard = Some((pid, shared.clone()));
            shared
        }
    };
    for i in shared.started.load(Ordering::Relaxed)..wanted {
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("loaderx-{i}"))
            .spawn(move || helper(&s, i));
        if spawned.is_err() {
            break; // fewer helpers only means less parallelism
        }
        shared.started.store(i + 1, Ordering::Relaxed);
    }
    Some(shared)
}

fn helper(shared: &Shared, index: usize) {
    let mut seen = shared.generation.load(Ordering::Acquire);
    loop {
        if index >= helpers_wanted() {
            // Beyond the thread count: out of the jobs' way (and not counted
            // as parked, so no job wakes it) until the count grows.
            let mut slot = lock(&shared.slot);
            while index >= helpers_wanted() {
                slot = shared.resized.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
            seen = shared.generation.load(Ordering::Acquire);
        }
        if !spin_until(|| shared.generation.load(Ordering::Acquire) != seen) {
            let mut slot = lock(&shared.slot);
            shared.parked.fetch_add(1, Ordering::SeqCst);
            while shared.generation.load(Ordering::Acquire) == seen {
                slot = shared.wake.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
            shared.parked.fetch_sub(1, Ordering::SeqCst);
        }
        seen = shared.generation.load(Ordering::Acquire);
        let joined = {
            let slot = lock(&shared.slot);
            // Checked under the lock the job was published under, so a count
            // set before the job was published is seen here.
            if index >= helpers_wanted() {
                continue;
            }
            slot.inspect(|job| {
                // SAFETY: the job is in the slot, so its caller has not retracted it
                // and will wait for `active` to return to zero.
                unsafe { &*job.0 }.active.fetch_add(1, Ordering::AcqRel);
            })
        };
        if let Some(job) = joined {
            // SAFETY: we joined under the lock; the job outlives our `active` count.
            let job = unsafe { &*job.0 };
            unsafe { (*job.run)() };
            job.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Runs `work` on every part, on the calling thread and any idle helper, and
/// returns the first error. Parts must be independent.
pub fn run_parts<T, F>(parts: Vec<T>, work: F) -> Result<()>
where
    T: Send,
    F: Fn(T) -> Result<()> + Sync,
{
    let shared = if parts.len() > 1 { pool() } else { None };
    let Some(shared) = shared else {
        return parts.into_iter().try_for_each(work);
    };
    let n = parts.len();
    let slots: Vec<Mutex<Option<T>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let claim_loop = || loop {
        let i = next.fetch_add(1, Ordering::AcqRel);
        if i >= n {
            return;
        }
        let Some(part) = lock(&slots[i]).take() else {
            continue;
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| work(part)))
            .unwrap_or_else(|_| Err(Error::Internal("a worker panicked".into())));
        if let Err(e) = outcome {
            lock(&failure).get_or_insert(e);
        }
    };
    let run: &(dyn Fn() + Sync) = &claim_loop;
    // SAFETY: the 'static lifetime is a lie the protocol below makes harmless: the
    // job is retracted before this function returns and we wait until no helper
    // is running it, so no helper touches `run` after it goes out of scope.
    let run: &'static (dyn Fn() + Sync) = unsafe { std::mem::transmute(run) };
    let job = Job {
        run,
        active: AtomicUsize::new(0),
    };
    let me = JobPtr(&job);
    {
        let mut slot = lock(&shared.slot);
        *slot = Some(me);
        shared.generation.fetch_add(1, Ordering::AcqRel);
    }
    if shared.parked.load(Ordering::SeqCst) > 0 {
        shared.wake.notify_all();
    }
    claim_loop();
    {
        let mut slot = lock(&shared.slot);
        if *slot == Some(me) {
            *slot = None;
        }
    }
    let mut spins = 0u32;
    while job.active.load(Ordering::Acquire) != 0 {
        spins = spins.wrapping_add(1);
        if spins < 1 << 12 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_runs_once_and_errors_surface() {
        let hits = AtomicUsize::new(0);
        run_parts((0..37).collect(), |_| {
            hits.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert_eq!(hits.load(Ordering::Relaxed), 37);
        let r = run_parts((0..8).collect(), |i: i32| {
            if i == 5 {
                Err(Error::InvalidArgument("five".into()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(Error::InvalidArgument(m)) if m == "five"));
    }

    #[test]
    fn parts_fill_disjoint_outputs_from_many_callers() {
        let callers: Vec<_> = (0..6)
            .map(|c| {
                std::thread::spawn(move || {
                    for round in 0..200u32 {
                        let mut out = vec![0u32; 1000];
                        let parts: Vec<_> = out.chunks_mut(100).enumerate().collect();
                        run_parts(parts, |(k, chunk)| {
                            chunk.fill(round * 100 + k as u32 + c);
                            Ok(())
                        })
                        .unwrap();
                        for (k, chunk) in out.chunks(100).enumerate() {
                            assert!(chunk.iter().all(|&v| v == round * 100 + k as u32 + c));
                        }
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
    }

    #[test]
    fn a_call_uses_at_most_the_thread_count_set_before_it() {
        let threads_of_a_call = || {
            let seen = Mutex::new(std::collections::HashSet::new());
            run_parts((0..24).collect(), |_: i32| {
                lock(&seen).insert(std::thread::current().id());
                std::thread::sleep(Duration::from_millis(2));
                Ok(())
            })
            .unwrap();
            seen.into_inner().unwrap().len()
        };
        set_threads(3).unwrap();
        assert!(threads_of_a_call() <= 3);
        set_threads(1).unwrap();
        assert_eq!(threads_of_a_call(), 1);
        set_threads(2).unwrap();
        assert!(threads_of_a_call() <= 2);
        assert_eq!(parallelism(), 2);
        for bad in [0, MAX_THREADS + 1] {
            assert!(matches!(set_threads(bad), Err(Error::InvalidArgument(_))));
        }
        assert_eq!(parallelism(), 2);
    }

    #[test]
    fn a_panicking_part_is_an_error_not_a_hang() {
        let r = run_parts((0..4).collect(), |i: i32| {
            if i == 2 {
                panic!("boom");
            }
            Ok(())
        });
        assert!(matches!(r, Err(Error::Internal(m)) if m.contains("panicked")));
    }
}
