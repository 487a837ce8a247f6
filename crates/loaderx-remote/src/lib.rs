//! Reading zrecord stores from object storage: `s3://`, `gs://`, `az://`,
//! `http(s)://` and `file://` URLs through the `object_store` crate.
//!
//! The format crate knows nothing of networks: it opens a store's metadata from
//! the bytes of its small files ([`zrecord::Metadata::from_parts`]), says where
//! each record's stored bytes are ([`zrecord::Metadata::entries`]) and reads
//! records from any [`zrecord::PayloadSource`] with the checks a local read
//! makes: this crate's source holds the bytes one gather fetched. This crate
//! does the rest:
//!
//! * [`Location`]: a URL and its storage options, refusing names `object_store`
//!   does not know; no cloud configuration is read from the environment unless
//!   asked (docs/remote.md lists what `object_store` reads regardless).
//! * [`SplitOptions`]: storage options as given ([`OptionValue`]: strings,
//!   integers, numbers, booleans), split once into [`FetchOptions`] (how ranges
//!   are coalesced, how many requests run at once, how failures are retried)
//!   and `object_store`'s configuration.
//! * [`RemoteStore`]: open, gather into a placement, verify; every record's
//!   stored bytes are checked against their checksum before they are decoded.
//!   Its index is fetched on demand, block by block, each block checked
//!   against `index.sum` as it comes in and kept in memory within a budget
//!   ([`DEFAULT_INDEX_MEMORY_BYTES`]) and in the cache.
//! * [`Cache`]: an optional local directory of fixed-size blocks keyed by the
//!   store's identity, shared safely by several processes.
//! * [`upload`]: a published local store into object storage, header last.
//! * [`concat_remote`]: stores published from part stores already in object
//!   storage, their data files copied by the storage itself, headers last,
//!   all or none; and an engine job's prefix: its heartbeat, cleaning it.
//!
//! Requests run on one lazily created tokio runtime per process, rebuilt in a
//! forked child, as the gather engine's threads are.

#![deny(missing_docs)]

mod cache;
mod cause;
mod fetch;
mod huge;
mod index;
mod jobs;
mod key;
mod location;
mod options;
mod publish;
mod runtime;
mod store;
mod upload;

pub use cache::{Cache, DEFAULT_CACHE_BLOCK_BYTES, DEFAULT_CACHE_MAX_BYTES};
pub use index::DEFAULT_INDEX_MEMORY_BYTES;
pub use jobs::{clean_jobs, occupied, put_object, remove_prefix};
pub use loaderx_gather::{Error, Result};
pub use location::{is_url, Location};
pub use options::{
    FetchOptions, OptionValue, SplitOptions, DEFAULT_DEADLINE, DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY, DEFAULT_READ_AHEAD_BYTES, LOADERX_OPTIONS, MAX_BACKOFF,
    MAX_CONCURRENCY, MAX_RETRIES,
};
pub use publish::{concat_remote, RemoteConcat};
pub use store::{Canceller, Pending, RemoteStore};
pub use upload::upload;
