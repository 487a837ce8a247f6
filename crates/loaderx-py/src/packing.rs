//! `loaderx._native.PackingSampler`, the base class of the public
//! `loaderx.sampler.PackingSampler`.
//!
//! The plan is computed once at construction with the GIL released. A draw
//! fills one reusable buffer of positions and one of pack offsets; `next()`
//! returns a view of the buffer's first positions (a step's count varies) and
//! `pack_offsets` the same offsets array object every time.

use loaderx_sampler::{Long, Packing};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PySlice;

use crate::errors::{invalid_argument, out_of_memory, overflow, IntoPy};
use crate::sampler::{int_arg, mode_arg, output, Region, DETACH_FROM};

#[pyclass(module = "loaderx._native", name = "PackingSampler", subclass)]
pub struct PyPacking {
    core: Packing,
    array: Py<PyArray1<u64>>,
    region: Region,
    offsets: Py<PyArray1<i64>>,
    offsets_region: Region<i64>,
    /// The step the next draw returns; `2^64` once the last step has been drawn.
    next_step: u128,
}

impl PyPacking {
    fn draw<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let step = u64::try_from(self.next_step).map_err(|_| {
            overflow("the sampler has drawn its last step (2**64 - 1); seek() to an earlier step")
        })?;
        let core = &self.core;
        let out = self.region.as_mut_slice();
        let offsets = self.offsets_region.as_mut_slice();
        let n = if out.len() >= DETACH_FROM {
            py.detach(|| core.fill(step, out, offsets)).py_err()?
        } else {
            core.fill(step, out, offsets).py_err()?
        };
        self.next_step += 1;
        let n = isize::try_from(n).map_err(|_| out_of_memory("a step beyond isize"))?;
        self.array.bind(py).get_item(PySlice::new(py, 0, n, 1))
    }
}

#[pymethods]
impl PyPacking {
    #[new]
    #[pyo3(signature = (lengths, tokens_per_pack, packs_per_step, mode, seed, long, positions=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        lengths: PyReadonlyArray1<'_, u64>,
        tokens_per_pack: &Bound<'_, PyAny>,
        packs_per_step: &Bound<'_, PyAny>,
        mode: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
        long: &str,
        positions: Option<PyReadonlyArray1<'_, u64>>,
    ) -> PyResult<Self> {
        let budget = int_arg(tokens_per_pack, "tokens_per_pack", 1)?;
        let per_step = int_arg(packs_per_step, "packs_per_step", 1)?;
        let mode = mode_arg(mode)?;
        let seed = int_arg(seed, "seed", 0)?;
        let long = Long::from_name(long).ok_or_else(|| {
            invalid_argument(format!(
                "long must be \"truncate\" or \"error\", got {long:?}"
            ))
        })?;
        let per_step = usize::try_from(per_step).map_err(|_| {
            invalid_argument(format!("packs_per_step {per_step} does not fit in memory"))
        })?;
        // The sampler keeps its own copy: the caller's array may change later.
        let given = lengths.as_slice()?;
        let mut own = Vec::new();
        own.try_reserve_exact(given.len())
            .map_err(|_| out_of_memory(format!("cannot copy {} record lengths", given.len())))?;
        own.extend_from_slice(given);
        let mut items = Vec::new();
        if let Some(p) = &positions {
            let given = p.as_slice()?;
            items
                .try_reserve_exact(given.len())
                .map_err(|_| out_of_memory(format!("cannot copy {} positions", given.len())))?;
            items.extend_from_slice(given);
        }
        let core = py
            .detach(|| Packing::over(own, items, budget, per_step, mode, seed, long))
            .py_err()?;
        let (array, region) = output(py, core.capacity().py_err()?)?;
        let (offsets, offsets_region) = output(py, per_step + 1)?;
        Ok(PyPacking {
            core,
            array,
            region,
            offsets,
            offsets_region,
            next_step: 0,
        })
    }

    /// The positions of the current step's packs, pack after pack, as a view of
    /// the sampler's reusable uint64 buffer (overwritten by the next draw); then
    /// advances one step.
    fn next<'py>(mut slf: PyRefMut<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        slf.draw(py)
    }

    fn __next__<'py>(mut slf: PyRefMut<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        slf.draw(py)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Makes the next draw return the packs of `step` (O(1)).
    fn seek(&mut self, step: &Bound<'_, PyAny>) -> PyResult<()> {
        self.next_step = int_arg(step, "step", 0)? as u128;
        Ok(())
    }

    /// The last draw's `packs_per_step + 1` int64 pack offsets, the same array
    /// every time (zeros before the first draw).
    #[getter]
    fn pack_offsets<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        self.offsets.bind(py).clone()
    }

    /// `(records, lengths digest, tokens_per_pack, packs_per_step, mode code,
    /// seed, long, next step)`.
    #[allow(clippy::type_complexity)]
    fn _state(&self) -> (usize, u64, u64, usize, u8, u64, &'static str, u128) {
        let c = &self.core;
        (
            c.lengths().len(),
            c.digest(),
            c.budget(),
            c.packs_per_step(),
            c.mode().code(),
            c.seed(),
            c.long().name(),
            self.next_step,
        )
    }

    /// A copy of the lengths the sampler was built from (one per item), for
    /// pickling.
    fn _lengths<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        PyArray1::from_slice(py, self.core.lengths())
    }

    /// A copy of the positions the sampler packs, or None when it packs every
    /// record once.
    fn _positions<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyArray1<u64>>> {
        self.core.positions_digest()?;
        Some(PyArray1::from_slice(py, self.core.positions()))
    }

    /// The xxh3-64 of the positions the sampler packs, or None.
    fn _positions_xxh3(&self) -> Option<u64> {
        self.core.positions_digest()
    }

    /// `(packs in the plan, tokens they hold, records in the largest pack)`.
    fn _plan(&self) -> (u64, u128, usize) {
        (self.core.packs(), self.core.tokens(), self.core.max_pack())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPacking>()?;
    Ok(())
}
