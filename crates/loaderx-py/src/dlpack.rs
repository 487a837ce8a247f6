//! The DLPack interchange object and its capsules (DLPack 1.x versioned, and the
//! legacy unversioned form for older consumers).

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{ffi, IntoPyObjectExt};
use zrecord::pool::Block;
use zrecord::DType;

pub const DL_CPU: i32 = 1;
const DLPACK_MAJOR: u32 = 1;
const DLPACK_MINOR: u32 = 0;
const NAME_LEGACY: &CStr = c"dltensor";
const NAME_VERSIONED: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct RawTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct ManagedLegacy {
    dl_tensor: RawTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut ManagedLegacy)>,
}

#[repr(C)]
struct ManagedVersioned {
    version: [u32; 2],
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut ManagedVersioned)>,
    flags: u64,
    dl_tensor: RawTensor,
}

/// What a capsule keeps alive: the memory and the shape arrays it points into.
struct Keep {
    _owner: Arc<Block>,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

unsafe extern "C" fn delete_legacy(m: *mut ManagedLegacy) {
    if !m.is_null() {
        // SAFETY: created by Box::into_raw in `capsule`, deleted exactly once.
        let m = unsafe { Box::from_raw(m) };
        drop(unsafe { Box::from_raw(m.manager_ctx as *mut Keep) });
    }
}

unsafe extern "C" fn delete_versioned(m: *mut ManagedVersioned) {
    if !m.is_null() {
        // SAFETY: as above.
        let m = unsafe { Box::from_raw(m) };
        drop(unsafe { Box::from_raw(m.manager_ctx as *mut Keep) });
    }
}

/// Capsule destructor: deletes the tensor unless a consumer took it (consumers
/// rename the capsule to `used_dltensor…` and become responsible for it).
unsafe extern "C" fn capsule_legacy(cap: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME_LEGACY.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, NAME_LEGACY.as_ptr()) as *mut ManagedLegacy;
            delete_legacy(p);
        }
    }
}

unsafe extern "C" fn capsule_versioned(cap: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, NAME_VERSIONED.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, NAME_VERSIONED.as_ptr()) as *mut ManagedVersioned;
            delete_versioned(p);
        }
    }
}

/// A contiguous, writable n-dimensional view into an allocation, exported only
/// through DLPack.
#[pyclass(module = "loaderx.zrecord", name = "DLTensor", frozen)]
pub struct DLTensor {
    owner: Arc<Block>,
    offset: usize,
    shape: Vec<i64>,
    dtype: DType,
    device: (i32, i32),
}

impl DLTensor {
    /// A view of `shape` starting `offset` bytes into `owner`; the caller
    /// guarantees the view lies inside the block.
    pub fn new(owner: Arc<Block>, offset: usize, shape: Vec<i64>, dtype: DType) -> Self {
        DLTensor {
            owner,
            offset,
            shape,
            dtype,
            device: (DL_CPU, 0),
        }
    }

    pub fn nbytes(&self) -> usize {
        self.shape.iter().product::<i64>().max(0) as usize * self.dtype.itemsize()
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape_vec(&self) -> &[i64] {
        &self.shape
    }

    pub fn owner(&self) -> &Arc<Block> {
        &self.owner
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The bytes of a host tensor.
    pub fn host_bytes(&self) -> PyResult<&[u8]> {
        if self.device.0 != DL_CPU {
            return Err(PyValueError::new_err(
                "this DLTensor is not in host memory; transfer it explicitly first",
            ));
        }
        // SAFETY: the view lies inside the block, which `self` keeps alive.
        Ok(unsafe { std::slice::from_raw_parts(self.owner.as_ptr().add(self.offset), self.nbytes()) })
    }

    fn strides(&self) -> Vec<i64> {
        let mut strides = vec![1i64; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.shape[i + 1].max(1);
        }
        strides
    }

    fn raw(&self, keep: &mut Keep) -> RawTensor {
        let (code, bits) = self.dtype.dlpack();
        RawTensor {
            // SAFETY: in bounds of the block (see `new`).
            data: unsafe { self.owner.as_ptr().add(self.offset) } as *mut c_void,
            device: DLDevice {
                device_type: self.device.0,
                device_id: self.device.1,
            },
            ndim: self.shape.len() as i32,
            dtype: DLDataType { code, bits, lanes: 1 },
            shape: keep.shape.as_mut_ptr(),
            strides: keep.strides.as_mut_ptr(),
            byte_offset: 0,
        }
    }

    fn capsule(&self, py: Python<'_>, versioned: bool) -> PyResult<Py<PyAny>> {
        let keep = Box::new(Keep {
            _owner: self.owner.clone(),
            shape: self.shape.clone(),
            strides: self.strides(),
        });
        let keep = Box::into_raw(keep);
        // SAFETY: `keep` is a valid, uniquely owned Box pointer until a deleter runs.
        let tensor = self.raw(unsafe { &mut *keep });
        let (ptr, name, dtor): (*mut c_void, &CStr, unsafe extern "C" fn(*mut ffi::PyObject)) = if versioned {
            let m = Box::new(ManagedVersioned {
                version: [DLPACK_MAJOR, DLPACK_MINOR],
                manager_ctx: keep as *mut c_void,
                deleter: Some(delete_versioned),
                flags: 0,
                dl_tensor: tensor,
            });
            (Box::into_raw(m) as *mut c_void, NAME_VERSIONED, capsule_versioned)
        } else {
            let m = Box::new(ManagedLegacy {
                dl_tensor: tensor,
                manager_ctx: keep as *mut c_void,
                deleter: Some(delete_legacy),
            });
            (Box::into_raw(m) as *mut c_void, NAME_LEGACY, capsule_legacy)
        };
        // SAFETY: `ptr` is a live managed tensor and `name` a static C string.
        let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(dtor)) };
        if cap.is_null() {
            // SAFETY: the capsule was not created, so we still own the tensor.
            unsafe {
                if versioned {
                    delete_versioned(ptr as *mut ManagedVersioned)
                } else {
                    delete_legacy(ptr as *mut ManagedLegacy)
                }
            }
            return Err(PyErr::fetch(py));
        }
        // SAFETY: PyCapsule_New returned a new reference.
        Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
    }
}

#[pymethods]
impl DLTensor {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        // The gather is synchronous, so there is no producer stream to order with.
        let _ = stream;
        if let Some(dev) = dl_device {
            if dev != self.device {
                return Err(PyBufferError::new_err(format!(
                    "DLTensor lives on device {:?} and does not copy to {dev:?}",
                    self.device
                )));
            }
        }
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "DLTensor exports without copying; copy in the consuming framework",
            ));
        }
        let versioned = matches!(max_version, Some((major, _)) if major >= 1);
        self.capsule(py, versioned)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        self.device
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    #[getter(dtype)]
    fn py_dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype(py, self.dtype)
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    #[getter(nbytes)]
    fn py_nbytes(&self) -> usize {
        self.nbytes()
    }

    #[getter]
    fn device(&self) -> (i32, i32) {
        self.device
    }

    fn __len__(&self) -> PyResult<usize> {
        match self.shape.first() {
            Some(&n) => Ok(n as usize),
            None => Err(pyo3::exceptions::PyTypeError::new_err("len() of a 0-d DLTensor")),
        }
    }

    fn __repr__(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        let dev = if self.device.0 == DL_CPU { "cpu".to_string() } else { format!("{:?}", self.device) };
        format!("DLTensor(shape={shape}, dtype={}, device={dev})", self.dtype.name())
    }
}

pub fn numpy_dtype<'py>(py: Python<'py>, dtype: DType) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    np.getattr("dtype")?.call1((dtype.name(),))?.into_bound_py_any(py)
}
