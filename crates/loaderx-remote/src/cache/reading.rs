//! One thread of a process at a time reads a block from its file into memory.
//!
//! The `Loader` begins several steps at once, and over a warm cache the first
//! steps of a new process find the same blocks missing from memory together:
//! each gather read its own copy of each block from the block's file, and all
//! but one copy were dropped, pages of memory the process had to be given
//! (and the kernel to zero) for nothing. A thread about to read a block marks
//! it; another thread that wants the same block meanwhile waits for the mark
//! to go, then finds the block kept in memory (or reads it itself, if the
//! first did not keep it). A thread marks one block at a time and waits for
//! nothing while it reads, so no two threads wait on each other.

use std::sync::{Condvar, Mutex, MutexGuard};

use rustc_hash::FxHashSet;

use super::Key;

/// The blocks being read from their files now.
#[derive(Debug, Default)]
pub(super) struct Reading {
    now: Mutex<FxHashSet<Key>>,
    done: Condvar,
}

/// This thread's mark on a block it reads; dropping it lets waiters go on.
pub(super) struct Mark<'a> {
    reading: &'a Reading,
    key: Key,
}

impl Reading {
    /// Marks `key` as read by this thread, once no other thread reads it; the
    /// second value says whether another did (the block may be in memory
    /// now).
    pub(super) fn mark(&self, key: &Key) -> (Mark<'_>, bool) {
        let mut now = self.lock();
        let mut waited = false;
        while now.contains(key) {
            waited = true;
            now = self.done.wait(now).unwrap_or_else(|e| e.into_inner());
        }
        now.insert(key.clone());
        (
            Mark {
                reading: self,
                key: key.clone(),
            },
            waited,
        )
    }

    fn lock(&self) -> MutexGuard<'_, FxHashSet<Key>> {
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Mark<'_> {
    fn drop(&mut self) {
        self.reading.lock().remove(&self.key);
        self.reading.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_second_reader_of_a_block_waits_for_the_first_and_others_do_not() {
        let r = Arc::new(Reading::default());
        let key: Key = (1, "data-000.bin".into(), 4);
        let (first, waited) = r.mark(&key);
        assert!(!waited);
        let (other, waited) = r.mark(&(1, "data-000.bin".into(), 5));
        assert!(!waited, "another block is read at once");
        drop(other);
        let started = Instant::now();
        let second = {
            let (r, key) = (r.clone(), key.clone());
            std::thread::spawn(move || {
                let (_mark, waited) = r.mark(&key);
                (waited, started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        let (waited, took) = second.join().unwrap();
        assert!(waited);
        assert!(took >= Duration::from_millis(100), "{took:?}");
        assert!(r.lock().is_empty(), "every mark is gone with its holder");
    }
}
