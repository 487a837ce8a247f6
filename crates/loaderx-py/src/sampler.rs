//! Sampler bindings: `loaderx._native.Sampler`, the base class of the public
//! `loaderx.sampler.Sampler`.
//!
//! The hot path is one native call per draw: `next()` / `__next__` fill one
//! reusable buffer and return the same cached NumPy array object every time. The
//! GIL is kept for small batches (releasing it costs more than filling a few
//! thousand indices) and released from [`DETACH_FROM`] indices on.

use std::ptr::NonNull;

use loaderx_sampler::{Mode, Sampler};
use numpy::{IntoPyArray, PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyMemoryError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use crate::errors::IntoPy;

/// Batches of at least this many indices are filled with the GIL released.
const DETACH_FROM: usize = 65_536;

/// The sampler's output memory: `len` u64s owned by the base object of the cached
/// NumPy array. That array does not own its data, so NumPy refuses to resize it,
/// and the sampler holds the array for its whole life: the region never moves and
/// is never freed while the sampler exists.
struct Region {
    ptr: NonNull<u64>,
    len: usize,
}

// SAFETY: the region is plain memory; it is only written through `&mut PySampler`
// (an exclusive borrow checked by PyO3), so no two threads write it at once.
unsafe impl Send for Region {}
// SAFETY: as above; shared references never touch the memory.
unsafe impl Sync for Region {}

impl Region {
    fn as_mut_slice(&mut self) -> &mut [u64] {
        // SAFETY: `ptr` addresses `len` initialized u64s kept alive by the array
        // (see the type's documentation); `&mut self` makes this the only writer.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[pyclass(module = "loaderx._native", name = "Sampler", subclass)]
pub struct PySampler {
    core: Sampler,
    array: Py<PyArray1<u64>>,
    region: Region,
    /// The step the next draw returns; `2^64` once the last step has been drawn.
    next_step: u128,
}

/// An integer argument in `min..=u64::MAX`: any object with `__index__` except
/// `bool`, with errors that name the argument.
fn int_arg(obj: &Bound<'_, PyAny>, name: &str, min: u64) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an integer, not bool"
        )));
    }
    let as_int = if obj.is_instance_of::<PyInt>() {
        obj.clone()
    } else {
        let type_name = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into());
        obj.call_method0(pyo3::intern!(obj.py(), "__index__"))
            .ok()
            .filter(|v| v.is_instance_of::<PyInt>())
            .ok_or_else(|| {
                PyTypeError::new_err(format!("{name} must be an integer, got {type_name}"))
            })?
    };
    match as_int.extract::<u64>() {
        Ok(v) if v >= min => Ok(v),
        _ => Err(PyValueError::new_err(format!(
            "{name} must be an integer in [{min}, 2**64 - 1], got {as_int}"
        ))),
    }
}

fn mode_arg(obj: &Bound<'_, PyAny>) -> PyResult<Mode> {
    let code = int_arg(obj, "mode", 0)?;
    u8::try_from(code)
        .ok()
        .and_then(Mode::from_code)
        .ok_or_else(|| PyValueError::new_err(format!("mode code must be 0, 1 or 2, got {code}")))
}

impl PySampler {
    fn draw<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let step = u64::try_from(self.next_step).map_err(|_| {
            PyOverflowError::new_err(
                "the sampler has drawn its last step (2**64 - 1); seek() to an earlier step",
            )
        })?;
        let core = &self.core;
        let out = self.region.as_mut_slice();
        if out.len() >= DETACH_FROM {
            py.detach(|| core.fill(step, out)).py_err()?;
        } else {
            core.fill(step, out).py_err()?;
        }
        self.next_step += 1;
        Ok(self.array.bind(py).clone())
    }
}

#[pymethods]
impl PySampler {
    #[new]
    fn new(
        py: Python<'_>,
        length: &Bound<'_, PyAny>,
        batch_size: &Bound<'_, PyAny>,
        mode: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let length = int_arg(length, "length", 1)?;
        let batch = int_arg(batch_size, "batch_size", 1)?;
        let mode = mode_arg(mode)?;
        let seed = int_arg(seed, "seed", 0)?;
        let batch = usize::try_from(batch).map_err(|_| {
            PyValueError::new_err(format!("batch_size {batch} does not fit in memory"))
        })?;
        let core = Sampler::new(mode, length, batch, seed).py_err()?;
        let mut buf: Vec<u64> = Vec::new();
        buf.try_reserve_exact(batch).map_err(|_| {
            PyMemoryError::new_err(format!(
                "cannot allocate a buffer of {batch} uint64 indices"
            ))
        })?;
        buf.resize(batch, 0);
        let array = buf.into_pyarray(py);
        let ptr = NonNull::new(array.data())
            .ok_or_else(|| PyMemoryError::new_err("NumPy returned a null index buffer"))?;
        Ok(PySampler {
            core,
            array: array.unbind(),
            region: Region { ptr, len: batch },
            next_step: 0,
        })
    }

    /// The batch of the current step, as the sampler's reusable uint64 buffer
    /// (overwritten by the next draw); then advances one step.
    fn next<'py>(mut slf: PyRefMut<'py, Self>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let py = slf.py();
        slf.draw(py)
    }

    fn __next__<'py>(mut slf: PyRefMut<'py, Self>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let py = slf.py();
        slf.draw(py)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Makes the next draw return the batch of `step` (O(1)).
    fn seek(&mut self, step: &Bound<'_, PyAny>) -> PyResult<()> {
        self.next_step = int_arg(step, "step", 0)? as u128;
        Ok(())
    }

    /// `(length, batch_size, mode code, seed, next step)`, for pickling.
    fn _state(&self) -> (u64, usize, u8, u64, u128) {
        (
            self.core.length(),
            self.core.batch(),
            self.core.mode().code(),
            self.core.seed(),
            self.next_step,
        )
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let cls = slf.get_type().qualname()?;
        let me = slf.try_borrow()?;
        let c = &me.core;
        Ok(format!(
            "{cls}(length={}, batch_size={}, mode={cls}.Mode.{}, seed={}) at step {}",
            c.length(),
            c.batch(),
            c.mode().name(),
            c.seed(),
            me.next_step
        ))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySampler>()?;
    Ok(())
}
