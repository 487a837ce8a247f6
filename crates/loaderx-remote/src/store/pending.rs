//! A remote gather between its beginning and its end: the requests in flight,
//! what cancels them, and the engine's view of it.

use std::sync::Mutex;

use loaderx_gather::{Allocator, Begun, Error, Records, Result};
use tokio::task::JoinHandle;
use zrecord::{data_file, Entry, Sizes};

use super::warm::Resident;
use super::RemoteStore;
use crate::fetch::{BlockKey, Spans};
use crate::index::View;
use crate::runtime::{block_on, pid};

/// A gather begun by [`RemoteStore::begin`]: its records' stored bytes are on
/// their way. [`Pending::finish`] waits for them and decodes; dropping it
/// instead cancels the requests still in flight.
pub struct Pending {
    pub(super) store: RemoteStore,
    pub(super) idx: Vec<u64>,
    pub(super) pid: u32,
    pub(super) bytes: Arrival,
}

/// Where a gather's stored bytes are.
pub(super) enum Arrival {
    /// On their way: the task fetching them.
    Fetching(JoinHandle<Result<Fetched>>),
    /// All in this process's memory when the gather began, read then.
    Here(Fetched),
    /// Taken by [`Pending::finish`].
    Taken,
}

impl Pending {
    /// How many records the gather returns.
    pub fn len(&self) -> usize {
        self.idx.len()
    }

    /// Whether the gather returns no records.
    pub fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }

    /// What cancels the gather's requests from another thread, even while
    /// [`Pending::finish`] waits for them: that finish then fails.
    pub fn canceller(&self) -> Canceller {
        let handle = match &self.bytes {
            Arrival::Fetching(task) => Some(task.abort_handle()),
            Arrival::Here(_) | Arrival::Taken => None,
        };
        Canceller {
            handle,
            pid: self.pid,
        }
    }

    /// Whether the bytes were all in memory when the gather began: finishing
    /// it only decodes.
    pub(super) fn is_here(&self) -> bool {
        matches!(self.bytes, Arrival::Here(_))
    }

    /// Whether finishing the gather would not wait for its bytes.
    pub(super) fn is_ready(&self) -> bool {
        match &self.bytes {
            Arrival::Fetching(task) => task.is_finished(),
            Arrival::Here(_) | Arrival::Taken => true,
        }
    }

    /// Waits for the gather's bytes and decodes them into one block of
    /// `allocator`, every record checked against its checksum first. A record
    /// found damaged in cached bytes has its blocks dropped and is fetched again
    /// once.
    pub fn finish(mut self, allocator: &Allocator) -> Result<Records> {
        let store = self.store.clone();
        let url = store.url();
        if self.pid != pid() {
            return Err(Error::invalid(format!(
                "{url}: a gather begun in process {} cannot be finished in process {}",
                self.pid,
                pid()
            )));
        }
        let fetched = match std::mem::replace(&mut self.bytes, Arrival::Taken) {
            Arrival::Here(f) => f,
            Arrival::Fetching(task) => wait(task, url)?,
            Arrival::Taken => return Err(Error::internal("the gather was already finished")),
        };
        let idx = &self.idx;
        let planning = &fetched.planning;
        let entries = &fetched.entries;
        let filled = match &fetched.payload {
            Payload::Spans(spans, _) => store.fill(planning, idx, entries, spans, allocator),
            Payload::Resident(blocks) => store.fill(planning, idx, entries, &**blocks, allocator),
        };
        match filled {
            Err(e) if matches!(e.format(), Some(zrecord::Error::Corrupt { .. })) => {
                let resident;
                let cached: &[BlockKey] = match &fetched.payload {
                    Payload::Spans(_, cached) => cached,
                    Payload::Resident(blocks) => {
                        resident = blocks.blocks_of(entries);
                        &resident
                    }
                };
                if cached.is_empty() {
                    return Err(e);
                }
                let source = store.source()?;
                if let Some(cache) = &store.0.cache {
                    for &(file, block) in cached {
                        cache.remove(source.id, &data_file(file), block);
                    }
                }
                let refetch = source.fetch(&fetched.entries, false);
                let (spans, _) = block_on(source.fetcher.bounded(refetch))?;
                store.fill(planning, idx, entries, &spans, allocator)
            }
            other => other,
        }
    }
}

/// The bytes a gather's task fetched, once it ends.
fn wait(task: JoinHandle<Result<Fetched>>, url: &str) -> Result<Fetched> {
    block_on(async move {
        task.await.map_err(|e| {
            if e.is_cancelled() {
                Error::Storage {
                    url: url.to_string(),
                    msg: "the gather was cancelled before its records arrived".into(),
                }
            } else {
                Error::internal(format!("a remote fetch did not complete: {e}"))
            }
        })?
    })
}

/// Cancels a begun gather's requests ([`Pending::canceller`]).
pub struct Canceller {
    handle: Option<tokio::task::AbortHandle>,
    pid: u32,
}

impl Canceller {
    /// Stops the gather's requests; its finish fails. A no-op once the records
    /// are in, and in a forked child (the requests are the parent's).
    pub fn cancel(&self) {
        if self.pid != pid() {
            return;
        }
        if let Some(a) = &self.handle {
            a.abort();
        }
    }
}

impl Drop for Canceller {
    fn drop(&mut self) {
        if self.pid != pid() {
            // As for a Pending: the parent's task is not touched in a child.
            std::mem::forget(self.handle.take());
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Arrival::Fetching(t) = std::mem::replace(&mut self.bytes, Arrival::Taken) {
            if self.pid == pid() {
                t.abort();
            } else {
                // A forked child's copy: the task belongs to the parent's
                // runtime, whose threads (and any lock they held at the fork) are
                // not here, so it is not touched.
                std::mem::forget(t);
            }
        }
    }
}

/// A [`Pending`] gather as the engine's [`Begun`]: finished once, into the
/// allocator it was begun with, cancelled from any thread meanwhile.
pub(super) struct BegunGather {
    pub(super) len: usize,
    pub(super) pending: Mutex<Option<Pending>>,
    pub(super) canceller: Canceller,
    pub(super) allocator: Allocator,
}

impl Begun for BegunGather {
    fn len(&self) -> usize {
        self.len
    }

    fn cancel(&self) {
        self.canceller.cancel();
    }

    fn is_ready(&self) -> bool {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.as_ref().is_none_or(Pending::is_ready)
    }

    fn finish(&self) -> Result<Records> {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::invalid("this gather was already finished"))?;
        pending.finish(&self.allocator)
    }
}

/// The stored bytes of a gather's records, and which cached blocks they came
/// from (dropped if a record in them turns out damaged).
pub(super) struct Fetched {
    pub(super) planning: Planning,
    pub(super) entries: Vec<Entry>,
    pub(super) payload: Payload,
}

/// What a gather's plan reads of the index besides its entries.
pub(super) enum Planning {
    /// The store's own: an index read whole at open.
    Index,
    /// A view of the store over the index blocks the gather needs.
    View(View),
    /// Nothing: the records' sizes were resolved with their entries.
    Resolved(Sizes),
}

/// Where a gather's stored bytes are held.
pub(super) enum Payload {
    /// The ranges it fetched or read from the cache, and the cached blocks
    /// read.
    Spans(Spans, Vec<BlockKey>),
    /// Whole blocks this process held in memory when it began.
    Resident(Box<Resident>),
}
