//! `loaderx._native.WindowedSampler`, the base class of the public
//! `loaderx.sampler.WindowedSampler`: the WINDOWED batch function behind the same
//! one-call-per-draw buffer as the Sampler.

use loaderx_sampler::Windowed;
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::errors::{invalid_argument, IntoPy};
use crate::sampler::{draw, int_arg, output, Region};

#[pyclass(module = "loaderx._native", name = "WindowedSampler", subclass)]
pub struct PyWindowed {
    core: Windowed,
    array: Py<PyArray1<u64>>,
    region: Region,
    /// The step the next draw returns; `2^64` once the last step has been drawn.
    next_step: u128,
}

impl PyWindowed {
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
impl PyWindowed {
    #[new]
    #[allow(clippy::too_many_arguments)] // Python's arguments, one to one
    fn new(
        py: Python<'_>,
        length: &Bound<'_, PyAny>,
        data_bytes: &Bound<'_, PyAny>,
        index_bytes: &Bound<'_, PyAny>,
        block_bytes: &Bound<'_, PyAny>,
        window_bytes: &Bound<'_, PyAny>,
        batch_size: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let length = int_arg(length, "length", 1)?;
        let data_bytes = int_arg(data_bytes, "data_bytes", 0)?;
        let index_bytes = int_arg(index_bytes, "index_bytes", 0)?;
        let block_bytes = int_arg(block_bytes, "block_bytes", 1)?;
        let window_bytes = int_arg(window_bytes, "window_bytes", 1)?;
        let batch = int_arg(batch_size, "batch_size", 1)?;
        let seed = int_arg(seed, "seed", 0)?;
        let batch = usize::try_from(batch)
            .map_err(|_| invalid_argument(format!("batch_size {batch} does not fit in memory")))?;
        let core = Windowed::new(
            length,
            data_bytes,
            index_bytes,
            block_bytes,
            window_bytes,
            batch,
            seed,
        )
        .py_err()?;
        let (array, region) = output(py, batch)?;
        Ok(PyWindowed {
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

    /// `(length, data_bytes, index_bytes, block_bytes, window_bytes,
    /// batch_size, seed, next step)`, for pickling and the resume state.
    #[allow(clippy::type_complexity)]
    fn _state(&self) -> (u64, u64, u64, u64, u64, usize, u64, u128) {
        let c = &self.core;
        (
            c.length(),
            c.data_bytes(),
            c.index_bytes(),
            c.block_bytes(),
            c.window_bytes(),
            c.batch(),
            c.seed(),
            self.next_step,
        )
    }

    /// `(positions per group, positions per window, windows per pass)`.
    fn _geometry(&self) -> (u64, u64, u64) {
        (self.core.group(), self.core.window(), self.core.windows())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWindowed>()
}
