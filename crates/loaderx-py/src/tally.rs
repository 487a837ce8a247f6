//! The payload bytes a Loader has gathered, counted by the gathers themselves so
//! that the loader's per-step Python never touches the batches to count them.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;

/// A running byte count that gathers given it add their batch's payload to:
/// a Dense batch's bytes, a Ragged batch's values' bytes.
#[pyclass(module = "loaderx._native", name = "Tally", frozen)]
#[derive(Default)]
pub struct Tally {
    bytes: AtomicU64,
}

impl Tally {
    pub fn add(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        // Saturates rather than wraps: a count that cannot be exact stays at the top.
        let _ = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_add(n))
            });
    }
}

#[pymethods]
impl Tally {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// The bytes counted so far.
    #[getter]
    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}
