//! Native host allocator: pooled, 64-byte aligned regions.

use std::sync::Arc;

use pyo3::prelude::*;
use zrecord::pool::{HostPool, DEFAULT_IDLE_LIMIT};

use crate::dlpack::DL_CPU;
use crate::errors::IntoPy;

#[pyclass(module = "loaderx._native", name = "HostAllocator", frozen)]
pub struct HostAllocator {
    pool: Arc<HostPool>,
}

impl HostAllocator {
    pub fn pool(&self) -> &Arc<HostPool> {
        &self.pool
    }
}

/// One exclusively owned region; freed back to its pool when dropped.
#[pyclass(module = "loaderx._native", name = "Allocation", frozen)]
pub struct Allocation {
    block: zrecord::pool::Block,
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
        (DL_CPU, 0)
    }
}

#[pymethods]
impl HostAllocator {
    #[new]
    #[pyo3(signature = (idle_limit=DEFAULT_IDLE_LIMIT))]
    fn new(idle_limit: usize) -> Self {
        HostAllocator {
            pool: HostPool::new(idle_limit),
        }
    }

    fn allocate(&self, py: Python<'_>, nbytes: usize) -> PyResult<Allocation> {
        let pool = &self.pool;
        let block = py.detach(|| pool.acquire(nbytes)).py_err()?;
        Ok(Allocation { block })
    }

    /// `(live allocations, live bytes, idle pooled bytes)`.
    fn stats(&self) -> (usize, usize, usize) {
        let s = self.pool.stats();
        (s.live, s.live_bytes, s.idle_bytes)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.pool.is_closed()
    }

    fn close(&self) {
        self.pool.close()
    }
}
