//! zrecord: immutable, typed, ordered record containers.
//!
//! A [`writer::Writer`] appends records in order and publishes one directory
//! atomically; a [`reader::Store`] gathers any positions into caller-provided
//! memory in parallel. This crate knows nothing of Python.

pub mod codec;
pub mod device;
pub mod dtype;
pub mod error;
pub mod format;
pub mod placement;
pub mod pool;
pub mod ragged;
pub mod reader;
pub mod sampler;
pub mod threads;
pub mod writer;

pub use codec::Codec;
pub use dtype::DType;
pub use error::{Error, Result};
pub use format::{Kind, Schema};
pub use reader::Store;
pub use writer::{Source, Writer};
