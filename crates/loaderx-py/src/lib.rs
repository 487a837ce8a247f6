//! `loaderx._native`: the PyO3 skin over the `zrecord` core. The public API and
//! its validation live in the Python package; this module converts arguments and
//! releases the GIL around all byte-moving work.

use pyo3::prelude::*;

mod allocator;
mod dlpack;
mod errors;
mod sampler;
mod store;

#[pymodule(gil_used = true)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ZrecordError", m.py().get_type::<errors::ZrecordError>())?;
    m.add("FORMAT_VERSION", zrecord::format::FORMAT_VERSION)?;
    m.add_class::<dlpack::DLTensor>()?;
    m.add_class::<store::PyStore>()?;
    m.add_class::<store::PyWriter>()?;
    m.add_class::<allocator::NativeAllocator>()?;
    m.add_class::<allocator::Allocation>()?;
    m.add_function(wrap_pyfunction!(store::check_ragged, m)?)?;
    m.add_function(wrap_pyfunction!(store::train_dictionary, m)?)?;
    m.add_function(wrap_pyfunction!(store::temp_sibling, m)?)?;
    m.add_function(wrap_pyfunction!(store::publish_dir, m)?)?;
    sampler::register(m)?;
    Ok(())
}
