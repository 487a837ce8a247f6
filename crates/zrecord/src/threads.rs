//! The helper threads behind every parallel gather and write.
//!
//! We own this pool instead of using rayon's global one for two reasons. A forked
//! child (a PyTorch DataLoader worker holding an open reader) inherits the pool's
//! bookkeeping but none of its threads, so we build a fresh pool the first time a
//! new process uses it. And the calling thread does a share of the work itself, so
//! the pool holds one thread fewer than the parallelism we want: on two cores that
//! is one persistent helper, which is what saturates memory bandwidth.

use std::sync::{Arc, Mutex, OnceLock};

use rayon::ThreadPool;

use crate::error::{Error, Result};

static POOL: Mutex<Option<(u32, Arc<ThreadPool>)>> = Mutex::new(None);

/// Threads that work on one call, the caller included. `LOADERX_NUM_THREADS`
/// overrides the machine's available parallelism. Read once per process: asking
/// the OS reads cgroup files, which costs more than a small gather.
pub fn parallelism() -> usize {
    static PARALLELISM: OnceLock<usize> = OnceLock::new();
    *PARALLELISM.get_or_init(|| {
        std::env::var("LOADERX_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

fn pool() -> Option<Arc<ThreadPool>> {
    let pid = std::process::id();
    let mut guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, p)) = guard.as_ref() {
        if *owner == pid {
            return Some(p.clone());
        }
    }
    // A pool inherited through fork has no threads behind it; dropping it would wait
    // for them, so it is forgotten instead.
    if let Some(old) = guard.take() {
        std::mem::forget(old);
    }
    let helpers = parallelism().saturating_sub(1);
    if helpers == 0 {
        return None;
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(helpers)
        .thread_name(|i| format!("loaderx-{i}"))
        .build()
        .ok()?;
    let p = Arc::new(p);
    *guard = Some((pid, p.clone()));
    Some(p)
}

/// Runs `work` on every part, the first on the calling thread and the rest on the
/// pool, and returns the first error. Parts must be independent.
pub fn run_parts<T, F>(parts: Vec<T>, work: F) -> Result<()>
where
    T: Send,
    F: Fn(T) -> Result<()> + Sync,
{
    let pool = if parts.len() > 1 { pool() } else { None };
    let Some(pool) = pool else {
        return parts.into_iter().try_for_each(work);
    };
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let record = |r: Result<()>| {
        if let Err(e) = r {
            let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
            f.get_or_insert(e);
        }
    };
    let mut parts = parts.into_iter();
    let first = parts.next();
    pool.in_place_scope(|scope| {
        for part in parts {
            let (work, record) = (&work, &record);
            scope.spawn(move |_| record(work(part)));
        }
        if let Some(part) = first {
            record(work(part));
        }
    });
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How many parts to split `units` of work into, given the smallest part worth a
/// thread hand-off.
pub fn part_count(units: usize, min_units_per_part: usize) -> usize {
    let by_size = units / min_units_per_part.max(1);
    by_size.clamp(1, parallelism())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
                Err(Error::Invalid("five".into()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(Error::Invalid(m)) if m == "five"));
    }
}
