//! The loaderx gather engine: where a gather runs and where its output lands.
//!
//! * [`threads`]: the helper threads behind every parallel gather, write and
//!   verify, exposed to the format crate as a [`zrecord::Parallel`].
//! * [`Pool`] / [`Block`]: pooled, aligned output memory with exclusive owners.
//! * [`Runtime`]: CUDA and HIP runtimes, loaded from a path at run time.
//! * [`Allocator`]: output memory on the host or a device, and the staging that
//!   gets decoded bytes there.
//! * [`RecordSource`]: a store's records into an allocator's block, in one call
//!   per batch, whatever holds the store.
//! * [`background`]: gathers begun ahead of their consumer, run in order on
//!   one background thread.

#![deny(missing_docs)]

mod allocator;
pub mod background;
mod device;
mod error;
mod per_process;
mod pool;
mod source;
pub mod threads;

pub use allocator::Allocator;
pub use device::{Api, DeviceKind, Runtime, DL_CUDA, DL_ROCM};
pub use error::{Error, Result};
pub use per_process::PerProcess;
pub use pool::{
    size_class, Backing, Block, HostMemory, Pool, PoolStats, DEFAULT_IDLE_LIMIT, DL_CPU,
};
pub use source::{Begun, RecordSizes, RecordSource, Records};
pub use threads::THREADS;
