//! The allocator of a gather's output: where the output lands (host memory or a
//! device's), and how the bytes get there: straight into the output pool's
//! memory, or into a host staging region first and then copied.

use std::sync::Arc;

use crate::device::{DeviceKind, DeviceMemory, PinnedMemory, Runtime};
use crate::error::{Error, Result};
use crate::pool::{Block, Pool};

/// A host-addressable region the gather fills before its bytes are copied to the
/// output.
#[derive(Clone)]
struct Stage {
    pool: Arc<Pool>,
    /// The runtime that copies to the device; None when the CPU copies.
    runtime: Option<Arc<Runtime>>,
    /// Stage only outputs that are decoded (compressed records), not raw copies.
    decoded_only: bool,
}

/// Where a gather's outputs live, and how decoded bytes reach them. A clone
/// shares the pools: a gather begun ahead holds one until it runs.
#[derive(Clone)]
pub struct Allocator {
    out: Arc<Pool>,
    stage: Option<Stage>,
}

impl Allocator {
    /// Outputs in host memory from `pool`.
    pub fn host(pool: Arc<Pool>) -> Allocator {
        Allocator {
            out: pool,
            stage: None,
        }
    }

    /// Outputs in memory of `device` from `runtime`, pooled up to `idle_limit`
    /// idle bytes. Device memory the host cannot address is filled through pinned
    /// staging and the runtime's copy. Managed memory is written directly by raw
    /// gathers; decoded records go through host scratch first, because a decoder
    /// reads back what it wrote and host reads of device-resident pages are slow.
    pub fn device(runtime: Arc<Runtime>, device: i32, idle_limit: usize) -> Result<Allocator> {
        let kind = runtime.api().output_memory();
        let count = runtime.device_count()?;
        if device < 0 || device as usize >= count {
            return Err(Error::invalid(format!(
                "device {device} does not exist: {} reports {count} device(s)",
                runtime.path()
            )));
        }
        let out = Pool::new(
            Box::new(DeviceMemory {
                runtime: runtime.clone(),
                device,
                kind,
            }),
            idle_limit,
        );
        let stage = match kind {
            DeviceKind::Device => Stage {
                pool: Pool::new(
                    Box::new(PinnedMemory {
                        runtime: runtime.clone(),
                        device,
                    }),
                    idle_limit,
                ),
                runtime: Some(runtime),
                decoded_only: false,
            },
            DeviceKind::Managed => Stage {
                pool: Pool::host(idle_limit),
                runtime: None,
                decoded_only: true,
            },
        };
        Ok(Allocator {
            out,
            stage: Some(stage),
        })
    }

    /// The pool outputs are allocated from.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.out
    }

    /// Frees idle regions and refuses new outputs; live outputs stay valid.
    pub fn close(&self) {
        self.out.close();
        if let Some(s) = &self.stage {
            s.pool.close();
        }
    }

    /// A block of `len` bytes of output memory holding what `fill` wrote into a
    /// `len`-byte buffer; `decoded` says whether `fill` decodes compressed records.
    pub fn fill(
        &self,
        len: usize,
        decoded: bool,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<Block> {
        let mut out = self.out.acquire(len)?;
        let stage = match &self.stage {
            Some(s) if decoded || !s.decoded_only => s,
            _ => {
                fill(out.as_mut_slice()?)?;
                return Ok(out);
            }
        };
        let mut staged = stage.pool.acquire(len)?;
        let tmp = staged.as_mut_slice()?;
        fill(tmp)?;
        match &stage.runtime {
            Some(rt) => rt.copy_to_device(self.out.device().1, out.as_ptr(), tmp)?,
            None => out.as_mut_slice()?.copy_from_slice(tmp),
        }
        Ok(out)
    }
}
