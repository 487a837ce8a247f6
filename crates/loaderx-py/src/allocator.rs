//! The native allocator behind every `loaderx.allocator` class: a pooled
//! placement of outputs in host memory or in a GPU runtime's memory.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zrecord::device::{Api, DeviceKind, Runtime};
use zrecord::placement::Placement;
use zrecord::pool::{Pool, DEFAULT_IDLE_LIMIT};

use crate::errors::IntoPy;

#[pyclass(module = "loaderx._native", name = "Allocator", frozen)]
pub struct NativeAllocator {
    placement: Placement,
    library: Option<String>,
}

impl NativeAllocator {
    pub fn placement(&self) -> &Placement {
        &self.placement
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
        self.block.pool().device()
    }
}

#[pymethods]
impl NativeAllocator {
    /// Pooled, 64-byte aligned host memory.
    #[staticmethod]
    #[pyo3(signature = (idle_limit=DEFAULT_IDLE_LIMIT))]
    fn host(idle_limit: usize) -> Self {
        NativeAllocator {
            placement: Placement::host(Pool::host(idle_limit)),
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
        let (api, kind) = match api {
            "cuda" => (Api::Cuda, DeviceKind::Device),
            "hip" => (Api::Hip, DeviceKind::Managed),
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown GPU runtime {other:?}; expected \"cuda\" or \"hip\""
                )))
            }
        };
        let placement = py
            .detach(|| {
                let rt = Runtime::load(api, &library)?;
                Placement::device(rt, device, kind, idle_limit)
            })
            .py_err()?;
        Ok(NativeAllocator {
            library: Some(library.display().to_string()),
            placement,
        })
    }

    fn allocate(&self, py: Python<'_>, nbytes: usize) -> PyResult<Allocation> {
        let pool = self.placement.pool();
        let block = py.detach(|| pool.acquire(nbytes)).py_err()?;
        Ok(Allocation { block })
    }

    /// `(live allocations, live bytes, idle pooled bytes)`.
    fn stats(&self) -> (usize, usize, usize) {
        let s = self.placement.pool().stats();
        (s.live, s.live_bytes, s.idle_bytes)
    }

    /// The DLPack `(device type, device id)` of the memory it hands out.
    #[getter]
    fn dl_device(&self) -> (i32, i32) {
        self.placement.pool().device()
    }

    /// The runtime library a GPU allocator loaded.
    #[getter]
    fn library(&self) -> Option<String> {
        self.library.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.placement.pool().is_closed()
    }

    fn close(&self) {
        self.placement.close()
    }
}
