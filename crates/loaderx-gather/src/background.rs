//! Gathers begun ahead of the caller that will take them: each runs on this
//! process's one background gather thread, in the order the gathers were
//! begun, while the caller goes on. A consumer that begins the next few steps
//! and then waits for the oldest never hands a batch between Python threads:
//! it waits here with the GIL released, and finds the batch ready when the
//! background thread is ahead of it.
//!
//! One thread, because a local gather is already parallel inside (through
//! [`crate::THREADS`]): gathers run side by side would only compete for the
//! same cores. The thread is started on first use and started afresh in a
//! forked child, which inherits the queue but not the thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::per_process::PerProcess;
use crate::source::{Begun, Records};
use crate::threads::spin_until;

/// The work of one gather: resolves, allocates and fills its output.
pub type Work = Box<dyn FnOnce() -> Result<Records> + Send>;

enum State {
    /// Waiting for the background thread.
    Queued(Work),
    /// On the background thread now.
    Running,
    /// Ran; its result and how long it took.
    Done(Result<Records>, Duration),
    /// Its result was taken by [`Begun::finish`]; how long it took.
    Taken(Duration),
    /// Cancelled before it ran; it never will.
    Cancelled,
}

struct Slot {
    state: Mutex<State>,
    changed: Condvar,
    /// Set once the state is no longer queued or running: what a waiter spins
    /// on before it parks.
    settled: AtomicBool,
}

impl Slot {
    fn settle(&self, state: &mut State, to: State) {
        *state = to;
        self.settled.store(true, Ordering::Release);
        self.changed.notify_all();
    }
}

/// The background thread's queue of gathers, oldest first. Each side spins a
/// little before it parks (the thread for the next gather, a caller for its
/// gather's end), and a gather begun wakes the thread only when it parked: on
/// a virtual machine, waking a parked thread costs more than a small gather.
struct Queue {
    slots: Mutex<VecDeque<Arc<Slot>>>,
    added: Condvar,
    /// Gathers in `slots`, readable without the lock.
    queued: AtomicUsize,
    /// Whether the thread waits on `added`; changed under the `slots` lock.
    parked: AtomicBool,
}

static QUEUE: PerProcess<Queue> = PerProcess::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// This process's queue, with its thread started.
fn queue() -> Result<Arc<Queue>> {
    QUEUE.get(|| {
        let queue = Arc::new(Queue {
            slots: Mutex::new(VecDeque::new()),
            added: Condvar::new(),
            queued: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
        });
        let q = queue.clone();
        std::thread::Builder::new()
            .name("loaderx-ahead".to_string())
            .spawn(move || run(&q))
            .map_err(|e| {
                Error::internal(format!("cannot start the background gather thread: {e}"))
            })?;
        Ok(queue)
    })
}

fn run(queue: &Queue) {
    loop {
        if queue.queued.load(Ordering::Acquire) == 0 {
            spin_until(|| queue.queued.load(Ordering::Acquire) != 0);
        }
        let slot = {
            let mut slots = lock(&queue.slots);
            loop {
                if let Some(s) = slots.pop_front() {
                    queue.queued.fetch_sub(1, Ordering::AcqRel);
                    break s;
                }
                queue.parked.store(true, Ordering::Release);
                slots = queue.added.wait(slots).unwrap_or_else(|e| e.into_inner());
                queue.parked.store(false, Ordering::Release);
            }
        };
        let work = {
            let mut state = lock(&slot.state);
            match std::mem::replace(&mut *state, State::Running) {
                State::Queued(work) => work,
                other => {
                    // Cancelled while queued: nothing to run.
                    *state = other;
                    continue;
                }
            }
        };
        let start = Instant::now();
        // A panic in a gather must not take the thread (and every later
        // gather) with it; it becomes that gather's error.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
            .unwrap_or_else(|_| Err(Error::internal("a background gather panicked")));
        let took = start.elapsed();
        slot.settle(&mut lock(&slot.state), State::Done(result, took));
    }
}

/// Queues `work`, a gather of `len` records, behind the gathers begun before it.
pub fn begin(len: usize, work: Work) -> Result<Box<dyn Begun>> {
    let slot = Arc::new(Slot {
        state: Mutex::new(State::Queued(work)),
        changed: Condvar::new(),
        settled: AtomicBool::new(false),
    });
    let queue = queue()?;
    let mut slots = lock(&queue.slots);
    slots.push_back(slot.clone());
    queue.queued.fetch_add(1, Ordering::AcqRel);
    if queue.parked.load(Ordering::Acquire) {
        queue.added.notify_one();
    }
    drop(slots);
    Ok(Box::new(Ahead {
        len,
        slot,
        pid: std::process::id(),
    }))
}

/// A gather queued on the background thread, as the engine's [`Begun`].
struct Ahead {
    len: usize,
    slot: Arc<Slot>,
    /// The process whose background thread runs it. A forked child's copy is
    /// never waited for (no thread there will run it) and its slot never
    /// locked (the parent's thread may have held the lock at the fork).
    pid: u32,
}

impl Ahead {
    fn forked(&self) -> bool {
        std::process::id() != self.pid
    }
}

impl Begun for Ahead {
    fn len(&self) -> usize {
        self.len
    }

    /// A gather still queued never runs; one already running cannot be
    /// stopped midway, and its caller waits for it (a local gather takes
    /// microseconds to milliseconds).
    fn cancel(&self) {
        if self.forked() {
            return;
        }
        let mut state = lock(&self.slot.state);
        if matches!(*state, State::Queued(_)) {
            self.slot.settle(&mut state, State::Cancelled);
        }
    }

    fn is_ready(&self) -> bool {
        self.forked() || self.slot.settled.load(Ordering::Acquire)
    }

    fn work_time(&self) -> Option<Duration> {
        if self.forked() {
            return None;
        }
        match &*lock(&self.slot.state) {
            State::Done(_, took) | State::Taken(took) => Some(*took),
            _ => None,
        }
    }

    fn finish(&self) -> Result<Records> {
        if self.forked() {
            return Err(Error::invalid(format!(
                "a gather begun in process {} cannot be finished in process {}",
                self.pid,
                std::process::id()
            )));
        }
        let settled = || self.slot.settled.load(Ordering::Acquire);
        if !settled() {
            spin_until(settled);
        }
        let mut state = lock(&self.slot.state);
        while matches!(*state, State::Queued(_) | State::Running) {
            state = self
                .slot
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        match std::mem::replace(&mut *state, State::Cancelled) {
            State::Done(result, took) => {
                *state = State::Taken(took);
                result
            }
            State::Taken(took) => {
                *state = State::Taken(took);
                Err(Error::invalid("this gather was already finished"))
            }
            _ => Err(Error::invalid("the gather was cancelled")),
        }
    }
}

impl Drop for Ahead {
    /// Dropped unfinished: a queued gather is cancelled, so that its output is
    /// never allocated.
    fn drop(&mut self) {
        self.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    use super::*;
    use crate::pool::Pool;

    /// A gather of `len` bytes, each `value`, that logs its run in `order`.
    fn work(value: u8, order: Arc<Mutex<Vec<u8>>>) -> Work {
        Box::new(move || {
            order.lock().unwrap().push(value);
            let mut block = Pool::host(1 << 20).acquire(4)?;
            block.as_mut_slice()?.fill(value);
            Ok((block, None))
        })
    }

    fn bytes(records: Result<Records>) -> Vec<u8> {
        let (mut block, _) = records.unwrap();
        block.as_mut_slice().unwrap().to_vec()
    }

    #[test]
    fn gathers_run_in_the_order_begun_and_finish_once() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let begun: Vec<_> = (1..=5)
            .map(|v| begin(4, work(v, order.clone())).unwrap())
            .collect();
        for (i, b) in begun.iter().enumerate().rev() {
            assert_eq!(bytes(b.finish()), vec![i as u8 + 1; 4]);
            assert!(b.is_ready());
            assert!(b.work_time().is_some());
        }
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 3, 4, 5]);
        let again = begun[0].finish().err().unwrap().to_string();
        assert!(again.contains("already finished"), "{again}");
    }

    #[test]
    fn a_cancelled_or_dropped_gather_never_runs() {
        let order = Arc::new(Mutex::new(Vec::new()));
        // Holds the thread until released, so that the next two stay queued.
        let (tx, rx) = mpsc::channel::<()>();
        let rx = Mutex::new(rx);
        let blocker = begin(
            0,
            Box::new(move || {
                rx.lock().unwrap().recv().unwrap();
                Err(Error::invalid("released"))
            }),
        )
        .unwrap();
        let cancelled = begin(4, work(7, order.clone())).unwrap();
        let dropped = begin(4, work(8, order.clone())).unwrap();
        let kept = begin(4, work(9, order.clone())).unwrap();
        assert!(!cancelled.is_ready() && cancelled.work_time().is_none());
        cancelled.cancel();
        assert!(cancelled.is_ready());
        drop(dropped);
        tx.send(()).unwrap();
        assert!(blocker.finish().is_err());
        assert_eq!(bytes(kept.finish()), vec![9; 4]);
        let err = cancelled.finish().err().unwrap().to_string();
        assert!(err.contains("cancelled"), "{err}");
        assert_eq!(*order.lock().unwrap(), vec![9]);
    }

    #[test]
    fn a_panicking_gather_is_an_error_and_the_thread_goes_on() {
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let bad = begin(
            0,
            Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
                panic!("a bug in a gather")
            }),
        )
        .unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let good = begin(4, work(3, order)).unwrap();
        let err = bad.finish().err().unwrap().to_string();
        assert!(err.contains("panicked"), "{err}");
        assert_eq!(bytes(good.finish()), vec![3; 4]);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
