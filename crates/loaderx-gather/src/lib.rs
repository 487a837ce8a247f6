//! The loaderx gather engine: where a gather runs and where its output lands.
//!
//! * [`threads`]: the helper threads behind every parallel gather, write and
//!   verify, exposed to the format crate as a [`zrecord::Parallel`].
//! * [`Pool`] / [`Block`]: pooled, aligned output memory with exclusive owners.
//! * [`Runtime`]: CUDA and HIP runtimes, loaded from a path at run time.
//! * [`Placement`]: output memory on the host or a device, and the staging that
//!   gets decoded bytes there.
//! * [`gather`]: a store's records into a placement, in one call per batch.

#![deny(missing_docs)]

mod device;
mod error;
pub mod gather;
mod placement;
mod pool;
pub mod threads;

pub use device::{Api, DeviceKind, Runtime, DL_CUDA, DL_ROCM};
pub use error::{Error, Result};
pub use placement::Placement;
pub use pool::{
    size_class, Backing, Block, HostMemory, Pool, PoolStats, DEFAULT_IDLE_LIMIT, DL_CPU,
};
pub use threads::THREADS;
