//! Values that are costly to create (compression contexts, scratch buffers),
//! kept for reuse: each concurrent user takes one and puts it back.

use std::sync::Mutex;

pub(crate) struct Recycler<T>(Mutex<Vec<T>>);

impl<T> Recycler<T> {
    pub(crate) fn new() -> Self {
        Recycler(Mutex::new(Vec::new()))
    }

    pub(crate) fn take(&self) -> Option<T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    pub(crate) fn put(&self, v: T) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(v);
    }
}
