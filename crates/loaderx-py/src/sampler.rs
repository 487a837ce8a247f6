//! Sampler bindings: `loaderx._native.Sampler` and `loaderx._native.MixtureSampler`,
//! the base classes of the public `loaderx.sampler.Sampler` and
//! `loaderx.sampler.MixtureSampler`.
//!
//! The hot path is one native call per draw: `next()` / `__next__` fill one
//! reusable buffer and return the same cached NumPy array object every time. The
//! GIL is kept for small batches (releasing it costs more than filling a few
//! thousand indices) and released from [`DETACH_FROM`] indices on.

use std::ptr::NonNull;

use loaderx_sampler::mixture::{Mixture, Scratch, Weight};
use loaderx_sampler::{Mode, Sampler};
use numpy::{IntoPyArray, PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use crate::errors::{invalid_argument, out_of_memory, overflow, wrong_type, IntoPy};

/// Batches of at least this many indices are filled with the GIL released.
pub(crate) const DETACH_FROM: usize = 65_536;

/// The sampler's output memory: `len` items owned by the base object of the cached
/// NumPy array. That array does not own its data, so NumPy refuses to resize it,
/// and the sampler holds the array for its whole life: the region never moves and
/// is never freed while the sampler exists.
pub(crate) struct Region<T = u64> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the region is plain memory; it is only written through `&mut PySampler`
// (an exclusive borrow checked by PyO3), so no two threads write it at once.
unsafe impl<T: Send> Send for Region<T> {}
// SAFETY: as above; shared references never touch the memory.
unsafe impl<T: Sync> Sync for Region<T> {}

impl<T> Region<T> {
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: `ptr` addresses `len` initialized items kept alive by the array
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
pub(crate) fn int_arg(obj: &Bound<'_, PyAny>, name: &str, min: u64) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(wrong_type(format!("{name} must be an integer, not bool")));
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
            .ok_or_else(|| wrong_type(format!("{name} must be an integer, got {type_name}")))?
    };
    match as_int.extract::<u64>() {
        Ok(v) if v >= min => Ok(v),
        _ => Err(invalid_argument(format!(
            "{name} must be an integer in [{min}, 2**64 - 1], got {as_int}"
        ))),
    }
}

pub(crate) fn mode_arg(obj: &Bound<'_, PyAny>) -> PyResult<Mode> {
    let code = int_arg(obj, "mode", 0)?;
    u8::try_from(code)
        .ok()
        .and_then(Mode::from_code)
        .ok_or_else(|| invalid_argument(format!("mode code must be 0, 1 or 2, got {code}")))
}

/// The zeroed output buffer of `batch` items as a NumPy array, and its memory.
pub(crate) fn output<T: numpy::Element + Clone + Default>(
    py: Python<'_>,
    batch: usize,
) -> PyResult<(Py<PyArray1<T>>, Region<T>)> {
    let mut buf: Vec<T> = Vec::new();
    buf.try_reserve_exact(batch).map_err(|_| {
        out_of_memory(format!(
            "cannot allocate a buffer of {batch} sampler outputs"
        ))
    })?;
    buf.resize(batch, T::default());
    let array = buf.into_pyarray(py);
    let ptr = NonNull::new(array.data())
        .ok_or_else(|| out_of_memory("NumPy returned a null index buffer"))?;
    Ok((array.unbind(), Region { ptr, len: batch }))
}

/// Fills `region` with the batch of `*next_step` by `fill` (with the GIL released
/// for large batches), advances the step, and returns the cached array.
pub(crate) fn draw<'py, F>(
    py: Python<'py>,
    next_step: &mut u128,
    region: &mut Region,
    array: &Py<PyArray1<u64>>,
    fill: F,
) -> PyResult<Bound<'py, PyArray1<u64>>>
where
    F: FnOnce(u64, &mut [u64]) -> loaderx_sampler::Result<()> + Send,
{
    let step = u64::try_from(*next_step).map_err(|_| {
        overflow("the sampler has drawn its last step (2**64 - 1); seek() to an earlier step")
    })?;
    let out = region.as_mut_slice();
    if out.len() >= DETACH_FROM {
        py.detach(|| fill(step, out)).py_err()?;
    } else {
        fill(step, out).py_err()?;
    }
    *next_step += 1;
    Ok(array.bind(py).clone())
}

impl PySampler {
    fn draw<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let core = &self.core;
        draw(
            py,
            &mut self.next_step,
            &mut self.region,
            &self.array,
            |step, out| core.fill(step, out),
        )
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
        let batch = usize::try_from(batch)
            .map_err(|_| invalid_argument(format!("batch_size {batch} does not fit in memory")))?;
        let core = Sampler::new(mode, length, batch, seed).py_err()?;
        let (array, region) = output(py, batch)?;
        Ok(PySampler {
            core,
            array,
            region,
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

#[pyclass(module = "loaderx._native", name = "MixtureSampler", subclass)]
pub struct PyMixture {
    core: Mixture,
    scratch: Scratch,
    array: Py<PyArray1<u64>>,
    region: Region,
    /// The step the next draw returns; `2^64` once the last step has been drawn.
    next_step: u128,
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Every item of the iterable `obj`, with a `TypeError` naming `what` otherwise.
fn items<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let not_iterable = || wrong_type(format!("{what} must be a sequence, got {}", type_name(obj)));
    obj.try_iter()
        .map_err(|_| not_iterable())?
        .collect::<PyResult<Vec<_>>>()
}

/// `(start, stop)` of item `i` of `ranges`.
fn range_arg(obj: &Bound<'_, PyAny>, i: usize) -> PyResult<(u64, u64)> {
    let pair = items(obj, &format!("ranges[{i}]"))
        .ok()
        .filter(|p| p.len() == 2)
        .ok_or_else(|| {
            wrong_type(format!(
                "ranges[{i}] must be a (start, stop) pair, got {}",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
    Ok((
        int_arg(&pair[0], &format!("start of ranges[{i}]"), 0)?,
        int_arg(&pair[1], &format!("stop of ranges[{i}]"), 0)?,
    ))
}

/// Item `i` of `weights`: an integer (anything with `__index__` but `bool`) or a
/// real number taken as a float.
fn weight_arg(obj: &Bound<'_, PyAny>, i: usize) -> PyResult<Weight> {
    if obj.is_instance_of::<PyBool>() {
        return Err(wrong_type(format!(
            "weights[{i}] must be a number, not bool"
        )));
    }
    let index = if obj.is_instance_of::<PyInt>() {
        Some(obj.clone())
    } else {
        obj.call_method0(pyo3::intern!(obj.py(), "__index__"))
            .ok()
            .filter(|v| v.is_instance_of::<PyInt>())
    };
    if let Some(v) = index {
        return Ok(match v.extract::<i128>() {
            Ok(v) => Weight::Int(v),
            // Python's float(int): correctly rounded, OverflowError beyond 2**1024.
            Err(_) => Weight::LargeInt(match v.extract::<f64>() {
                Ok(f) => f,
                Err(_) if v.lt(0)? => f64::NEG_INFINITY,
                Err(_) => f64::INFINITY,
            }),
        });
    }
    obj.extract::<f64>().map(Weight::Float).map_err(|_| {
        wrong_type(format!(
            "weights[{i}] must be a real number, got {}",
            type_name(obj)
        ))
    })
}

impl PyMixture {
    fn draw<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let core = &self.core;
        let scratch = &mut self.scratch;
        draw(
            py,
            &mut self.next_step,
            &mut self.region,
            &self.array,
            |step, out| core.fill(step, out, scratch),
        )
    }
}

#[pymethods]
impl PyMixture {
    #[new]
    fn new(
        py: Python<'_>,
        ranges: &Bound<'_, PyAny>,
        weights: &Bound<'_, PyAny>,
        batch_size: &Bound<'_, PyAny>,
        modes: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let ranges = items(ranges, "ranges")?
            .iter()
            .enumerate()
            .map(|(i, r)| range_arg(r, i))
            .collect::<PyResult<Vec<_>>>()?;
        let weights = items(weights, "weights")?
            .iter()
            .enumerate()
            .map(|(i, w)| weight_arg(w, i))
            .collect::<PyResult<Vec<_>>>()?;
        let batch = int_arg(batch_size, "batch_size", 1)?;
        let modes = items(modes, "modes")?
            .iter()
            .map(mode_arg)
            .collect::<PyResult<Vec<_>>>()?;
        let seed = int_arg(seed, "seed", 0)?;
        let batch = usize::try_from(batch)
            .map_err(|_| invalid_argument(format!("batch_size {batch} does not fit in memory")))?;
        let core = Mixture::new(&ranges, &weights, batch, &modes, seed).py_err()?;
        let scratch = core.scratch().map_err(|e| out_of_memory(e.0))?;
        let (array, region) = output(py, batch)?;
        Ok(PyMixture {
            core,
            scratch,
            array,
            region,
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

    /// Makes the next draw return the batch of `step` (O(1) in the step).
    fn seek(&mut self, step: &Bound<'_, PyAny>) -> PyResult<()> {
        self.next_step = int_arg(step, "step", 0)? as u128;
        Ok(())
    }

    /// `(ranges, integer weights, batch_size, mode codes, seed, next step)`, for
    /// pickling and the resume state.
    #[allow(clippy::type_complexity)]
    fn _state(&self) -> (Vec<(u64, u64)>, Vec<u64>, usize, Vec<u32>, u64, u128) {
        let c = &self.core;
        (
            c.ranges(),
            c.weights().to_vec(),
            c.batch(),
            c.modes().iter().map(|m| u32::from(m.code())).collect(),
            c.seed(),
            self.next_step,
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySampler>()?;
    m.add_class::<PyMixture>()?;
    Ok(())
}
