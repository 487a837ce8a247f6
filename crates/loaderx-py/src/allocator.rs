//! The native allocator behind every `loaderx.allocator` class: pooled output
//! memory on the host or in a GPU runtime's memory.

use std::path::PathBuf;

use loaderx_gather::{Allocator, Api, Block, Pool, Runtime, DEFAULT_IDLE_LIMIT};
use pyo3::prelude::*;

use crate::errors::IntoPy;

#[pyclass(module = "loaderx._native", name = "Allocator", frozen)]
pub struct PyAllocator {
    allocator: Allocator,
    library: Option<String>,
}

impl PyAllocator {
    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }
}

/// One exclusively owned region; freed back to its pool when dropped.
#[pyclass(module = "loaderx._native", name = "Allocation", frozen)]
pub struct Allocation {
    block: Block,
}

#[pymethods]
impl Allocation {
    #[getter]
    fn address(&self) -> usize {
        self.block.as_ptr() as usize
    }
    #[getter]
    fn size(&self) -> usize {
        self.block.len()
    }
    #[getter]
    fn device(&self) -> (i32, i32) {
        self.block.pool().device()
    }
}

#[pymethods]
impl PyAllocator {
    /// Pooled, 64-byte aligned host memory.
    #[staticmethod]
    #[pyo3(signature = (idle_limit=DEFAULT_IDLE_LIMIT))]
    fn host(idle_limit: usize) -> Self {
        PyAllocator {
            allocator: Allocator::host(Pool::host(idle_limit)),
            library: None,
        }
    }

    /// Pooled memory of `device` from the runtime library at `library`: `api` is
    /// "cuda" (device memory, filled through pinned staging) or "hip" (managed
    /// memory the host writes directly).
    #[staticmethod]
    fn device(
        py: Python<'_>,
        api: &str,
        library: PathBuf,
        device: i32,
        idle_limit: usize,
    ) -> PyResult<Self> {
        let allocator = py
            .detach(|| {
                let rt = Runtime::load(Api::from_name(api)?, &library)?;
                Allocator::device(rt, device, idle_limit)
            })
            .py_err()?;
        Ok(PyAllocator {
            library: Some(library.display().to_string()),
            allocator,
        })
    }

    fn allocate(&self, py: Python<'_>, nbytes: usize) -> PyResult<Allocation> {
        let pool = self.allocator.pool();
        let block = py.detach(|| pool.acquire(nbytes)).py_err()?;
        Ok(Allocation { block })
    }

    /// `(live allocations, live bytes, idle pooled bytes)`.
    fn stats(&self) -> (usize, usize, usize) {
        let s = self.allocator.pool().stats();
        (s.live, s.live_bytes, s.idle_bytes)
    }

    /// The DLPack `(device type, device id)` of the memory it hands out.
    #[getter]
    fn dl_device(&self) -> (i32, i32) {
        self.allocator.pool().device()
    }

    /// The runtime library a GPU allocator loaded.
    #[getter]
    fn library(&self) -> Option<String> {
        self.library.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.allocator.pool().is_closed()
    }

    fn close(&self) {
        self.allocator.close()
    }
}
