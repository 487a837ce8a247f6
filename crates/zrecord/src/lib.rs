//! zrecord: immutable, typed, ordered record containers on disk.
//!
//! A [`Writer`] appends records in order and publishes one directory atomically;
//! an opened [`Store`] resolves any positions to their records and decodes them
//! into memory the caller provides. `docs/FORMAT.md` describes every byte.
//!
//! This crate is the format and nothing else: it knows nothing of threads (a
//! caller that wants parallel gathers passes a [`Parallel`]), memory pools,
//! devices or Python.

#![deny(missing_docs)]

mod codec;
mod concat;
mod decode;
mod dtype;
mod error;
mod format;
mod held;
mod local;
mod meta;
mod parallel;
mod plan;
mod publish;
mod ragged;
mod recycle;
mod sizes;
mod source;
mod verify;
mod writer;

pub use codec::{encoded_size, train_dictionary, Codec, ALL_CODECS, MAX_EXPANSION, ZSTD_LEVEL};
pub use concat::{concat, ConcatOptions, ConcatReport};
pub use dtype::{dl_code, DType, ALL_DTYPES};
pub use error::{out_of_range_message, Error, Result};
pub use format::{
    data_file, index_sums_size, version_for, Entry, Header, IndexSums, Kind, Schema, ATTRS_FILE,
    DEFAULT_DATA_SHARDS, DICT_FILE, ENTRY_FIXED, FORMAT_VERSION, HEADER_FILE, INDEX_BLOCK_BYTES,
    INDEX_FILE, INDEX_SUMS_FILE, MAGIC, MAX_ATTRS_BYTES, MAX_DATA_FILES, MAX_DATA_SHARDS,
    MAX_HEADER_BYTES, MAX_NDIM, MAX_RECORD_BYTES, NEWEST_FORMAT_VERSION, OLDEST_FORMAT_VERSION,
    WIDE_FORMAT_VERSION,
};
pub use held::{CheckedBlock, HeldBlocks, HeldIndex, NotFetched};
pub use local::{LocalIndex, Store};
pub use meta::{Metadata, Parts, ReadOptions, StoreInfo};
pub use parallel::{Parallel, Sequential};
pub use plan::{Plan, Resolved, Sizes};
pub use publish::{clean_stale, is_build_dir_name, temp_sibling, BuildDir, PARTS_DIR};
pub use ragged::{
    align_up, element_count, record_spans, RaggedLayout, RaggedView, ALIGN, MAX_RAGGED_ELEMENTS,
};
pub use sizes::SIZES_STEP_RECORDS;
pub use source::{prefetch_head, IndexSource, PayloadSource};
pub use verify::VERIFY_STEP_BYTES;
pub use writer::{Source, Writer, CHUNK_BYTES};
