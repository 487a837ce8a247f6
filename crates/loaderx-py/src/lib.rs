//! `loaderx._native`: the PyO3 skin over the `zrecord` format, the gather engine
//! and the sampler kernels. The public API, its signatures and docstrings live in
//! the Python package; this module converts arguments and results, maps errors
//! once (`errors`), and releases the GIL around all byte-moving work.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::IntoPy;

mod allocator;
mod convert;
mod dlpack;
mod errors;
mod packing;
mod publish;
mod sampler;
mod store;
mod tally;
mod windowed;
mod writer;

// Python allocates every object of a #[pyclass] with its own allocator, which
// aligns to 16 bytes, so no class may need more: a value that does (xxh3's
// hasher state is 64-byte aligned, and the writer holds several) lives behind a
// Box, which Rust's allocator aligns as its type asks.
const _: () = {
    const MAX: usize = 16;
    assert!(std::mem::align_of::<writer::PyWriter>() <= MAX);
    assert!(std::mem::align_of::<store::PyStore>() <= MAX);
    assert!(std::mem::align_of::<allocator::PyAllocator>() <= MAX);
    assert!(std::mem::align_of::<sampler::PySampler>() <= MAX);
    assert!(std::mem::align_of::<windowed::PyWindowed>() <= MAX);
    assert!(std::mem::align_of::<packing::PyPacking>() <= MAX);
    assert!(std::mem::align_of::<publish::PyBuildDir>() <= MAX);
    assert!(std::mem::align_of::<sampler::PyMixture>() <= MAX);
    assert!(std::mem::align_of::<store::PyPending>() <= MAX);
    assert!(std::mem::align_of::<allocator::Allocation>() <= MAX);
    assert!(std::mem::align_of::<dlpack::DLTensor>() <= MAX);
};

/// The rules and limits the Python package checks arguments against, defined
/// once in the crates and exported here so that no rule is written twice.
fn constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let names = |v: Vec<&'static str>| PyTuple::new(py, v);
    m.add(
        "DTYPES",
        names(zrecord::ALL_DTYPES.iter().map(|d| d.name()).collect())?,
    )?;
    m.add(
        "CODECS",
        names(zrecord::ALL_CODECS.iter().map(|c| c.name()).collect())?,
    )?;
    m.add(
        "DICTIONARY_CODECS",
        names(
            zrecord::ALL_CODECS
                .iter()
                .filter(|c| c.takes_dictionary())
                .map(|c| c.name())
                .collect(),
        )?,
    )?;
    m.add("FORMAT_VERSION", zrecord::FORMAT_VERSION)?;
    m.add("DEFAULT_DATA_SHARDS", zrecord::DEFAULT_DATA_SHARDS)?;
    m.add("MAX_DATA_SHARDS", zrecord::MAX_DATA_SHARDS)?;
    m.add("MAX_DATA_FILES", zrecord::MAX_DATA_FILES)?;
    m.add("PARTS_DIR", zrecord::PARTS_DIR)?;
    m.add("NEWEST_FORMAT_VERSION", zrecord::NEWEST_FORMAT_VERSION)?;
    m.add("MAX_NDIM", zrecord::MAX_NDIM)?;
    m.add("MAX_RECORD_BYTES", zrecord::MAX_RECORD_BYTES)?;
    m.add("MAX_RAGGED_ELEMENTS", zrecord::MAX_RAGGED_ELEMENTS)?;
    m.add("MAX_ATTRS_BYTES", zrecord::MAX_ATTRS_BYTES)?;
    m.add("HEADER_FILE", zrecord::HEADER_FILE)?;
    m.add("INDEX_FILE", zrecord::INDEX_FILE)?;
    m.add("INDEX_SUMS_FILE", zrecord::INDEX_SUMS_FILE)?;
    m.add("DICT_FILE", zrecord::DICT_FILE)?;
    m.add("ATTRS_FILE", zrecord::ATTRS_FILE)?;
    m.add("INDEX_BLOCK_BYTES", zrecord::INDEX_BLOCK_BYTES)?;
    m.add("SIZES_STEP_RECORDS", zrecord::SIZES_STEP_RECORDS)?;
    m.add("VERIFY_STEP_BYTES", zrecord::VERIFY_STEP_BYTES)?;
    m.add("ZSTD_LEVEL", zrecord::ZSTD_LEVEL)?;
    m.add("ALIGN", zrecord::ALIGN)?;
    m.add("DEFAULT_IDLE_LIMIT", loaderx_gather::DEFAULT_IDLE_LIMIT)?;
    m.add("DL_CPU", loaderx_gather::DL_CPU)?;
    m.add("DL_CUDA", loaderx_gather::DL_CUDA)?;
    m.add("DL_ROCM", loaderx_gather::DL_ROCM)?;
    m.add("MAX_THREADS", loaderx_gather::threads::MAX_THREADS)?;
    m.add(
        "SAMPLER_MODES",
        names(
            loaderx_sampler::Mode::ALL
                .iter()
                .map(|m| m.name())
                .collect(),
        )?,
    )?;
    m.add("SAMPLER_LAST_STEP", loaderx_sampler::LAST_STEP)?;
    m.add("PACK_WINDOW", loaderx_sampler::packing::PACK_WINDOW)?;
    m.add(
        "DEFAULT_WINDOW_BYTES",
        loaderx_sampler::windowed::DEFAULT_WINDOW_BYTES,
    )?;
    m.add(
        "LOADERX_STORAGE_OPTIONS",
        PyTuple::new(py, loaderx_remote::LOADERX_OPTIONS)?,
    )?;
    m.add(
        "DEFAULT_CACHE_BLOCK_BYTES",
        loaderx_remote::DEFAULT_CACHE_BLOCK_BYTES,
    )?;
    m.add(
        "DEFAULT_MAX_CONCURRENCY",
        loaderx_remote::DEFAULT_MAX_CONCURRENCY,
    )?;
    m.add("MAX_CONCURRENCY", loaderx_remote::MAX_CONCURRENCY)?;
    m.add("MAX_RETRIES", loaderx_remote::MAX_RETRIES)?;
    m.add(
        "DEFAULT_INDEX_MEMORY_BYTES",
        loaderx_remote::DEFAULT_INDEX_MEMORY_BYTES,
    )?;
    m.add(
        "DEFAULT_CACHE_MAX_BYTES",
        loaderx_remote::DEFAULT_CACHE_MAX_BYTES,
    )?;
    Ok(())
}

/// The file name of a store's data file number `i` (`data-NNN.bin`).
#[pyfunction]
fn data_file_name(i: u8) -> String {
    zrecord::data_file(usize::from(i))
}

/// Sets how many threads work on one gather, write or verify, the caller
/// included, from the next call on (see `loaderx_gather::threads::set_threads`).
#[pyfunction]
fn set_threads(n: &Bound<'_, PyAny>) -> PyResult<()> {
    let max = loaderx_gather::threads::MAX_THREADS;
    // Any integer, however large, is refused in the one message.
    let n = n.extract::<usize>().map_err(|_| {
        errors::invalid_argument(format!("the thread count must be in 1..={max}, got {n}"))
    })?;
    loaderx_gather::threads::set_threads(n).py_err()
}

/// How many threads work on one gather, write or verify, the caller included.
#[pyfunction]
fn thread_count() -> usize {
    loaderx_gather::threads::parallelism()
}

#[pymodule(gil_used = true)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::init(m.py())?;
    constants(m)?;
    m.add_class::<dlpack::DLTensor>()?;
    m.add_class::<store::PyStore>()?;
    m.add_class::<store::PyPending>()?;
    m.add_class::<tally::Tally>()?;
    m.add_class::<writer::PyWriter>()?;
    m.add_class::<allocator::PyAllocator>()?;
    m.add_class::<allocator::Allocation>()?;
    m.add_function(wrap_pyfunction!(dlpack::py_numpy_dtype, m)?)?;
    m.add_function(wrap_pyfunction!(writer::check_ragged, m)?)?;
    m.add_function(wrap_pyfunction!(store::out_of_range, m)?)?;
    m.add_function(wrap_pyfunction!(writer::train_dictionary, m)?)?;
    m.add_function(wrap_pyfunction!(writer::encoded_size, m)?)?;
    m.add_class::<publish::PyBuildDir>()?;
    m.add_function(wrap_pyfunction!(publish::clean_stale, m)?)?;
    m.add_function(wrap_pyfunction!(publish::concat, m)?)?;
    m.add_function(wrap_pyfunction!(store::upload, m)?)?;
    m.add_function(wrap_pyfunction!(store::concat_urls, m)?)?;
    m.add_function(wrap_pyfunction!(store::remove_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(store::occupied, m)?)?;
    m.add_function(wrap_pyfunction!(store::put_object, m)?)?;
    m.add_function(wrap_pyfunction!(store::clean_jobs, m)?)?;
    m.add_function(wrap_pyfunction!(store::is_url, m)?)?;
    m.add_function(wrap_pyfunction!(data_file_name, m)?)?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    m.add_function(wrap_pyfunction!(thread_count, m)?)?;
    sampler::register(m)?;
    windowed::register(m)?;
    packing::register(m)?;
    Ok(())
}
