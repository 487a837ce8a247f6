//! A value each process has its own of, such as a thread or a runtime: made on
//! first use, and made again in a forked child, which inherits the parent's
//! value but none of the threads behind it.

use std::sync::{Arc, Mutex};

use crate::error::Result;

/// This process's value of `T`, remade after `fork`.
pub struct PerProcess<T> {
    cell: Mutex<Option<(u32, Arc<T>)>>,
}

impl<T> PerProcess<T> {
    /// None yet: the first [`PerProcess::get`] makes it.
    pub const fn new() -> Self {
        PerProcess {
            cell: Mutex::new(None),
        }
    }

    /// This process's value, made by `make` when it has none. A value inherited
    /// through fork is forgotten, never dropped: dropping it could wait for
    /// threads the child does not have, or for a lock held at the fork.
    pub fn get(&self, make: impl FnOnce() -> Result<Arc<T>>) -> Result<Arc<T>> {
        let pid = std::process::id();
        let mut guard = self.cell.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((owner, value)) = guard.as_ref() {
            if *owner == pid {
                return Ok(value.clone());
            }
        }
        if let Some(old) = guard.take() {
            std::mem::forget(old);
        }
        let value = make()?;
        *guard = Some((pid, value.clone()));
        Ok(value)
    }
}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        PerProcess::new()
    }
}
