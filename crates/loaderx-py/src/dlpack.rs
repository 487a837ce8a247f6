//! The DLPack interchange object and its capsules (DLPack 1.x versioned, and the
//! legacy unversioned form for older consumers).

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use loaderx_gather::{Block, DL_CPU};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{ffi, IntoPyObjectExt};
use zrecord::{dl_code, DType};

use crate::errors::{
    bad_buffer, invalid_argument, is_type_error, missing_dependency, wrong_type, IntoPy,
};

const DLPACK_MAJOR: u32 = 1;
/// DLPack 1.1 added the float8 type codes; the layout is 1.0's.
const DLPACK_MINOR: u32 = 1;
const FLAG_READ_ONLY: u64 = 1;
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

/// Reinterprets host bytes as `T`s, a plain integer type, refusing misaligned or
/// ragged lengths.
pub(crate) fn typed<'a, T>(bytes: &'a [u8], what: &str) -> PyResult<&'a [T]> {
    let size = std::mem::size_of::<T>();
    // An empty array's data pointer may be anything, so it is not checked.
    if bytes.is_empty() {
        return Ok(&[]);
    }
    if bytes.len() % size != 0 || (bytes.as_ptr() as usize) % std::mem::align_of::<T>() != 0 {
        return Err(invalid_argument(format!(
            "{what} is not an aligned array of {size}-byte items"
        )));
    }
    // SAFETY: aligned, whole items, and any bit pattern is a valid i32 / u64.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size) })
}

/// The memory behind a DLTensor.
pub enum Memory {
    /// A region from one of our pools.
    Pooled(Block),
    /// A caller's host array, kept alive by holding a reference to it.
    Borrowed {
        ptr: *mut u8,
        len: usize,
        _keep: Py<PyAny>,
    },
    /// Host memory another framework exported through DLPack; dropping it calls
    /// the producer's deleter.
    Imported {
        ptr: *mut u8,
        len: usize,
        _tensor: ImportedTensor,
    },
}

// SAFETY: `Borrowed` memory is only read or written through DLTensors, like pooled
// memory; Py<PyAny> itself is Send + Sync.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

impl Memory {
    pub fn as_ptr(&self) -> *mut u8 {
        match self {
            Memory::Pooled(b) => b.as_ptr(),
            Memory::Borrowed { ptr, .. } | Memory::Imported { ptr, .. } => *ptr,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Memory::Pooled(b) => b.len(),
            Memory::Borrowed { len, .. } | Memory::Imported { len, .. } => *len,
        }
    }

    /// The DLPack `(device type, device id)` of the memory.
    fn device(&self) -> (i32, i32) {
        match self {
            Memory::Pooled(b) => b.pool().device(),
            Memory::Borrowed { .. } | Memory::Imported { .. } => (DL_CPU, 0),
        }
    }

    /// Whether this process can read the memory through its address.
    fn host_accessible(&self) -> bool {
        match self {
            Memory::Pooled(b) => b.pool().host_accessible(),
            Memory::Borrowed { .. } | Memory::Imported { .. } => true,
        }
    }
}

/// What a capsule keeps alive: the memory and the shape arrays it points into.
struct Keep {
    _owner: Arc<Memory>,
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
            let p =
                ffi::PyCapsule_GetPointer(cap, NAME_VERSIONED.as_ptr()) as *mut ManagedVersioned;
            delete_versioned(p);
        }
    }
}

/// A managed tensor taken from another producer's capsule: its deleter runs once,
/// when the last view of the memory goes.
pub struct ImportedTensor(Managed);

enum Managed {
    Legacy(*mut ManagedLegacy),
    Versioned(*mut ManagedVersioned),
}

impl Drop for ImportedTensor {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a capsule this process renamed to
        // `used_…`, so nobody else calls its deleter. Producers' deleters take
        // the GIL themselves if they need it (DLPack requires that of them).
        unsafe {
            match self.0 {
                Managed::Legacy(m) => {
                    if let Some(d) = (*m).deleter {
                        d(m)
                    }
                }
                Managed::Versioned(m) => {
                    if let Some(d) = (*m).deleter {
                        d(m)
                    }
                }
            }
        }
    }
}

/// Calls `producer.__dlpack__`, asking for a versioned capsule first.
fn dlpack_capsule<'py>(producer: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = producer.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (DLPACK_MAJOR, DLPACK_MINOR))?;
    match producer.call_method("__dlpack__", (), Some(&kwargs)) {
        Err(e) if is_type_error(py, &e) => producer.call_method0("__dlpack__"),
        r => r,
    }
}

/// Whether `strides` (in elements; null meaning C order) describe a C-contiguous
/// layout of `shape`. Extents of 0 or 1 may carry any stride.
fn c_contiguous(shape: &[i64], strides: Option<&[i64]>) -> bool {
    let Some(strides) = strides else { return true };
    if shape.contains(&0) {
        return true;
    }
    let mut expect = 1i64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expect {
            return false;
        }
        expect = expect.saturating_mul(d);
    }
    true
}

/// What an imported host tensor is, once every field the producer wrote is checked.
struct HostView {
    ptr: *mut u8,
    len: usize,
    shape: Vec<i64>,
    dtype: DType,
}

/// Checks a producer's tensor before a byte of it is trusted: host memory, a
/// dtype a store holds, a sane shape whose size fits, C-contiguous, aligned.
///
/// # Safety
/// `raw` must be a live DLPack tensor: `shape` and (when not null) `strides`
/// point to `ndim` entries.
unsafe fn check_host_tensor(raw: &RawTensor) -> PyResult<HostView> {
    let device = (raw.device.device_type, raw.device.device_id);
    if device.0 != DL_CPU {
        return Err(bad_buffer(format!(
            "the tensor lives on DLPack device {device:?}; transfer it to the host explicitly"
        )));
    }
    let DLDataType { code, bits, lanes } = raw.dtype;
    let dtype = match DType::from_dlpack(code, bits) {
        Some(d) if lanes == 1 => d,
        _ => {
            return Err(bad_buffer(format!(
                "DLPack type (code {code}, bits {bits}, lanes {lanes}) is not a dtype a store holds"
            )))
        }
    };
    let ndim = usize::try_from(raw.ndim)
        .ok()
        .filter(|&n| n <= MAX_IMPORT_NDIM)
        .ok_or_else(|| bad_buffer(format!("DLPack ndim {} is invalid", raw.ndim)))?;
    let shape: Vec<i64> = if ndim == 0 {
        Vec::new()
    } else if raw.shape.is_null() {
        return Err(bad_buffer("DLPack shape is null"));
    } else {
        // SAFETY: the caller guarantees `ndim` shape entries.
        unsafe { std::slice::from_raw_parts(raw.shape, ndim) }.to_vec()
    };
    let strides = if raw.strides.is_null() || ndim == 0 {
        None
    } else {
        // SAFETY: as for the shape.
        Some(unsafe { std::slice::from_raw_parts(raw.strides, ndim) })
    };
    let len = shape
        .iter()
        .try_fold(dtype.itemsize(), |acc, &d| {
            usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        })
        .filter(|&n| isize::try_from(n).is_ok())
        .ok_or_else(|| bad_buffer(format!("DLPack shape {shape:?} is invalid")))?;
    if !c_contiguous(&shape, strides) {
        return Err(bad_buffer(format!(
            "the tensor is strided (shape {shape:?}, strides {:?}); make it contiguous first \
             if a copy is intended",
            strides.unwrap_or_default()
        )));
    }
    if len == 0 {
        // Nothing is read through an empty tensor's pointer, whatever it is.
        let ptr = std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8;
        return Ok(HostView {
            ptr,
            len,
            shape,
            dtype,
        });
    }
    let offset = usize::try_from(raw.byte_offset)
        .map_err(|_| bad_buffer("DLPack byte_offset is invalid"))?;
    let ptr = (raw.data as *mut u8).wrapping_add(offset);
    if raw.data.is_null() || (ptr as usize) % dtype.itemsize() != 0 {
        return Err(bad_buffer(
            "the tensor's data pointer is null or misaligned",
        ));
    }
    Ok(HostView {
        ptr,
        len,
        shape,
        dtype,
    })
}

/// Takes the managed tensor out of a DLPack capsule (either kind) as a host
/// DLTensor, following the consumer protocol: the capsule is renamed `used_…`
/// only once the tensor is accepted, and then its deleter is ours to call.
fn import_capsule(capsule: &Bound<'_, PyAny>) -> PyResult<DLTensor> {
    let cap = capsule.as_ptr();
    // SAFETY: PyCapsule_IsValid accepts any object; pointers are read only from
    // a valid capsule of the matching name, whose producer owns a live tensor.
    unsafe {
        let (view, owner, readonly, used) =
            if ffi::PyCapsule_IsValid(cap, NAME_VERSIONED.as_ptr()) == 1 {
                let m = ffi::PyCapsule_GetPointer(cap, NAME_VERSIONED.as_ptr())
                    as *mut ManagedVersioned;
                if m.is_null() || (*m).version[0] != DLPACK_MAJOR {
                    return Err(bad_buffer(format!(
                        "DLPack version {:?} is not 1.x",
                        if m.is_null() { [0, 0] } else { (*m).version }
                    )));
                }
                let view = check_host_tensor(&(*m).dl_tensor)?;
                let readonly = (*m).flags & FLAG_READ_ONLY != 0;
                (
                    view,
                    ImportedTensor(Managed::Versioned(m)),
                    readonly,
                    c"used_dltensor_versioned",
                )
            } else if ffi::PyCapsule_IsValid(cap, NAME_LEGACY.as_ptr()) == 1 {
                let m = ffi::PyCapsule_GetPointer(cap, NAME_LEGACY.as_ptr()) as *mut ManagedLegacy;
                if m.is_null() {
                    return Err(bad_buffer("DLPack capsule holds no tensor"));
                }
                let view = check_host_tensor(&(*m).dl_tensor)?;
                (
                    view,
                    ImportedTensor(Managed::Legacy(m)),
                    false,
                    c"used_dltensor",
                )
            } else {
                return Err(wrong_type(
                    "__dlpack__ did not return a DLPack capsule (or it was already consumed)",
                ));
            };
        if ffi::PyCapsule_SetName(cap, used.as_ptr()) != 0 {
            // Still the capsule's: it must not be deleted twice.
            std::mem::forget(owner);
            return Err(PyErr::fetch(capsule.py()));
        }
        let mut t = DLTensor::new(
            Arc::new(Memory::Imported {
                ptr: view.ptr,
                len: view.len,
                _tensor: owner,
            }),
            0,
            view.shape,
            view.dtype,
        );
        t.readonly = readonly;
        Ok(t)
    }
}

/// The most dimensions an imported tensor may have (DLPack producers use far fewer).
const MAX_IMPORT_NDIM: usize = 64;

/// A contiguous, writable n-dimensional view into an allocation, exported only
/// through DLPack.
#[pyclass(module = "loaderx.zrecord", name = "DLTensor", frozen)]
pub struct DLTensor {
    owner: Arc<Memory>,
    offset: usize,
    shape: Vec<i64>,
    dtype: DType,
    device: (i32, i32),
    readonly: bool,
}

impl DLTensor {
    /// A view of `shape` starting `offset` bytes into `owner`; the caller
    /// guarantees the view lies inside the block.
    pub fn new(owner: Arc<Memory>, offset: usize, shape: Vec<i64>, dtype: DType) -> Self {
        DLTensor {
            device: owner.device(),
            owner,
            offset,
            shape,
            dtype,
            readonly: false,
        }
    }

    pub fn pooled(block: Block, shape: Vec<i64>, dtype: DType) -> Self {
        DLTensor::new(Arc::new(Memory::Pooled(block)), 0, shape, dtype)
    }

    /// A view of part of this tensor's memory.
    pub fn view(&self, offset: usize, shape: Vec<i64>, dtype: DType) -> PyResult<Self> {
        let n = shape.iter().try_fold(dtype.itemsize(), |acc, &d| {
            usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        });
        match n.and_then(|n| n.checked_add(self.offset + offset)) {
            Some(end) if end <= self.owner.len() => Ok(DLTensor {
                offset: self.offset + offset,
                shape,
                dtype,
                owner: self.owner.clone(),
                device: self.device,
                readonly: self.readonly,
            }),
            _ => Err(invalid_argument("view lies outside the tensor's memory")),
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

    /// The bytes of a tensor whose memory the host can read: host memory, or a
    /// device's managed memory.
    pub fn host_bytes(&self) -> PyResult<&[u8]> {
        if !self.owner.host_accessible() {
            return Err(invalid_argument(format!(
                "this DLTensor lives in memory of device {:?} that the host cannot read; \
                 transfer it to the host explicitly first",
                self.device
            )));
        }
        // SAFETY: the view lies inside the block, which `self` keeps alive.
        Ok(unsafe {
            std::slice::from_raw_parts(self.owner.as_ptr().add(self.offset), self.nbytes())
        })
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
            dtype: DLDataType {
                code,
                bits,
                lanes: 1,
            },
            shape: keep.shape.as_mut_ptr(),
            strides: keep.strides.as_mut_ptr(),
            byte_offset: 0,
        }
    }

    /// `minor` is the DLPack minor version a versioned capsule declares.
    fn capsule(&self, py: Python<'_>, versioned: bool, minor: u32) -> PyResult<Py<PyAny>> {
        let keep = Box::new(Keep {
            _owner: self.owner.clone(),
            shape: self.shape.clone(),
            strides: self.strides(),
        });
        let keep = Box::into_raw(keep);
        // SAFETY: `keep` is a valid, uniquely owned Box pointer until a deleter runs.
        let tensor = self.raw(unsafe { &mut *keep });
        let (ptr, name, dtor): (*mut c_void, &CStr, unsafe extern "C" fn(*mut ffi::PyObject)) =
            if versioned {
                let m = Box::new(ManagedVersioned {
                    version: [DLPACK_MAJOR, minor],
                    manager_ctx: keep as *mut c_void,
                    deleter: Some(delete_versioned),
                    flags: if self.readonly { FLAG_READ_ONLY } else { 0 },
                    dl_tensor: tensor,
                });
                (
                    Box::into_raw(m) as *mut c_void,
                    NAME_VERSIONED,
                    capsule_versioned,
                )
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
                return Err(bad_buffer(format!(
                    "DLTensor lives on device {:?} and does not copy to {dev:?}",
                    self.device
                )));
            }
        }
        if copy == Some(true) {
            return Err(bad_buffer(
                "DLTensor exports without copying; copy in the consuming framework",
            ));
        }
        let versioned = matches!(max_version, Some((major, _)) if major >= 1);
        // A capsule never declares more than the consumer asked for. Type codes
        // do not depend on it: a 1.0 consumer that knows the float8 codes (torch
        // asks for 1.0) reads them, and one that does not refuses the dtype.
        let minor = match max_version {
            Some((DLPACK_MAJOR, m)) => m.min(DLPACK_MINOR),
            _ => DLPACK_MINOR,
        };
        self.capsule(py, versioned, minor)
    }

    /// NumPy's array interface (version 3) for host memory, so that
    /// `np.asarray(t)` and consumers that read the interface share the memory.
    /// Memory elsewhere has no address the host may read; that is a TypeError
    /// rather than an AttributeError, which NumPy would take to mean "no
    /// interface" and silently wrap the tensor in a 0-d object array.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.device.0 != DL_CPU {
            return Err(wrong_type(format!(
                "this DLTensor lives on DLPack device {:?}, not in host memory, so it has no \
                 __array_interface__; import it with the framework's from_dlpack \
                 (torch.from_dlpack, jax.dlpack.from_dlpack, cupy.from_dlpack)",
                self.device
            )));
        }
        let interface = PyDict::new(py);
        interface.set_item("version", 3)?;
        interface.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        interface.set_item("typestr", typestr(py, self.dtype)?)?;
        // C-contiguous, which the interface spells as no strides.
        interface.set_item("strides", py.None())?;
        // SAFETY: in bounds of the block (see `new`).
        let data = unsafe { self.owner.as_ptr().add(self.offset) } as usize;
        interface.set_item("data", (data, self.readonly))?;
        Ok(interface)
    }

    /// Wraps a C-contiguous NumPy array without copying; the tensor keeps the
    /// array alive and inherits its writability.
    #[staticmethod]
    fn _from_array(array: &Bound<'_, PyUntypedArray>) -> PyResult<DLTensor> {
        if !array.is_c_contiguous() {
            return Err(invalid_argument("the array must be C-contiguous"));
        }
        let dtype = DType::from_name(&array.dtype().str()?.to_string())
            .ok_or_else(|| invalid_argument("the array's dtype cannot be exported"))?;
        let shape: Vec<i64> = array.shape().iter().map(|&d| d as i64).collect();
        // SAFETY: reading the fields of a live array object.
        let (ptr, writable) = unsafe {
            let raw = array.as_array_ptr();
            (
                (*raw).fields.data as *mut u8,
                (*raw).fields.flags & numpy::npyffi::NPY_ARRAY_WRITEABLE != 0,
            )
        };
        let len = array.len() * dtype.itemsize();
        let mut t = DLTensor::new(
            Arc::new(Memory::Borrowed {
                ptr,
                len,
                _keep: array.clone().into_any().unbind(),
            }),
            0,
            shape,
            dtype,
        );
        t.readonly = !writable;
        Ok(t)
    }

    /// Imports a host array from any DLPack producer (torch, JAX, NumPy...)
    /// without copying, keeping the producer's memory alive; every DLPack type
    /// code a store holds is accepted, bfloat16 and float8 included.
    #[staticmethod]
    fn _from_dlpack(producer: &Bound<'_, PyAny>) -> PyResult<DLTensor> {
        import_capsule(&dlpack_capsule(producer)?)
    }

    /// Per-record views of packed ragged values, given the batch's `cu_seqlens`
    /// and `(n, ndim)` `shapes` tensors (read in place, so device batches whose
    /// memory the host can read split too).
    fn _split(
        &self,
        cu_seqlens: PyRef<'_, DLTensor>,
        shapes: PyRef<'_, DLTensor>,
    ) -> PyResult<Vec<DLTensor>> {
        let ndim = match shapes.shape.as_slice() {
            [_, ndim] => usize::try_from(*ndim).unwrap_or(0),
            _ => 0,
        };
        let cu = typed::<i32>(cu_seqlens.host_bytes()?, "cu_seqlens")?;
        let shapes = typed::<u64>(shapes.host_bytes()?, "shapes")?;
        zrecord::record_spans(cu, shapes, ndim, self.dtype.itemsize())
            .py_err()?
            .into_iter()
            .map(|(at, shape)| self.view(at, shape.iter().map(|&d| d as i64).collect(), self.dtype))
            .collect()
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
            None => Err(wrong_type("len() of a 0-d DLTensor")),
        }
    }

    fn __repr__(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        let dev = if self.device.0 == DL_CPU {
            "cpu".to_string()
        } else {
            format!("{:?}", self.device)
        };
        format!(
            "DLTensor(shape={shape}, dtype={}, device={dev})",
            self.dtype.name()
        )
    }
}

/// The array interface's type string: byte order, kind and size for NumPy's own
/// types; the name for the `ml_dtypes` types, which have no kind letter of their
/// own (NumPy reads any name it knows, and `numpy_dtype` makes sure it does).
fn typestr(py: Python<'_>, dtype: DType) -> PyResult<String> {
    let (code, _) = dtype.dlpack();
    let kind = match code {
        dl_code::BOOL => 'b',
        dl_code::INT => 'i',
        dl_code::UINT => 'u',
        dl_code::FLOAT => 'f',
        dl_code::COMPLEX => 'c',
        _ => {
            numpy_dtype(py, dtype)?;
            return Ok(dtype.name().to_string());
        }
    };
    let order = match dtype.itemsize() {
        1 => '|',
        _ if cfg!(target_endian = "little") => '<',
        _ => '>',
    };
    Ok(format!("{order}{kind}{}", dtype.itemsize()))
}

/// The NumPy dtype of `dtype`. NumPy knows `bfloat16` and the float8 types only
/// once `ml_dtypes` has registered them, so a name NumPy does not know is looked
/// up there, importing it then and only then; without it, the error says to
/// install it.
pub fn numpy_dtype<'py>(py: Python<'py>, dtype: DType) -> PyResult<Bound<'py, PyAny>> {
    let make = py.import("numpy")?.getattr("dtype")?;
    match make.call1((dtype.name(),)) {
        Ok(d) => return d.into_bound_py_any(py),
        Err(e) if !is_type_error(py, &e) => return Err(e),
        Err(_) => {}
    }
    let ml_dtypes = py.import("ml_dtypes").map_err(|e| {
        missing_dependency(
            py,
            e,
            "ml_dtypes",
            format!(
                "dtype {} needs the ml_dtypes package, which is not installed: \
                 pip install ml-dtypes",
                dtype.name()
            ),
        )
    })?;
    make.call1((ml_dtypes.getattr(dtype.name())?,))?
        .into_bound_py_any(py)
}

/// `numpy_dtype` by name, for the Python package.
#[pyfunction(name = "numpy_dtype")]
pub fn py_numpy_dtype<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let dtype = DType::from_name(name).ok_or_else(|| {
        invalid_argument(format!(
            "{name:?} is not the name of a dtype a store can hold"
        ))
    })?;
    numpy_dtype(py, dtype)
}
