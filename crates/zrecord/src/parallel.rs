//! How one call spreads its independent parts over threads. This crate only cuts
//! work into parts (it knows the records); an engine decides where the parts run.
//! [`Sequential`] runs them one after another on the calling thread.

use std::sync::Mutex;

use crate::error::{Error, Result};

/// Runs the independent parts of one gather, write or verify.
pub trait Parallel: Sync {
    /// How many parts `bytes` of output are worth splitting into; `decodes` says
    /// whether records are decompressed, which costs far more per byte than a copy.
    fn parts(&self, bytes: usize, decodes: bool) -> usize;

    /// Runs `task(i)` for every `i` in `0..n` and returns the first error. Parts may
    /// run concurrently and in any order.
    fn run(&self, n: usize, task: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()>;
}

/// Every part on the calling thread, in order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sequential;

impl Parallel for Sequential {
    fn parts(&self, _bytes: usize, _decodes: bool) -> usize {
        1
    }

    fn run(&self, n: usize, task: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()> {
        (0..n).try_for_each(task)
    }
}

/// Runs `work` on every part through `par`, handing each part over by value.
pub(crate) fn run_parts<T, F>(par: &dyn Parallel, parts: Vec<T>, work: F) -> Result<()>
where
    T: Send,
    F: Fn(T) -> Result<()> + Sync,
{
    if parts.len() <= 1 {
        return parts.into_iter().try_for_each(work);
    }
    let slots: Vec<Mutex<Option<T>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    par.run(slots.len(), &|i| {
        let part = slots
            .get(i)
            .and_then(|s| s.lock().unwrap_or_else(|e| e.into_inner()).take())
            .ok_or_else(|| Error::Internal(format!("part {i} was run twice or never existed")))?;
        work(part)
    })
}
