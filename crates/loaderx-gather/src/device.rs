//! GPU runtimes (CUDA, HIP), loaded from a library path at run time and never
//! linked, and the pool backings built on them.
//!
//! Only the handful of runtime entry points an allocator needs are bound: device
//! count, selection and query, device, managed and pinned host allocation, and a
//! host-to-device copy. Which library to load is the caller's decision.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use libloading::Library;

use crate::error::{Error, Result};
use crate::pool::Backing;

/// DLPack's device type of CUDA device memory.
pub const DL_CUDA: i32 = 2;
/// DLPack's device type of HIP (ROCm) device and managed memory.
pub const DL_ROCM: i32 = 10;

const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEM_ATTACH_GLOBAL: c_uint = 1;

/// The GPU runtime family a library belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// NVIDIA's CUDA runtime (`libcudart`).
    Cuda,
    /// AMD's HIP runtime (`libamdhip64`), the runtime of ROCm.
    Hip,
}

impl Api {
    fn prefix(self) -> &'static str {
        match self {
            Api::Cuda => "cuda",
            Api::Hip => "hip",
        }
    }

    /// The runtime's name for an entry point: CUDA and HIP differ only in the
    /// prefix, except for pinned host memory.
    fn symbol(self, name: &str) -> String {
        match (self, name) {
            (Api::Cuda, "HostMalloc") => "cudaHostAlloc".into(),
            (Api::Cuda, "HostFree") => "cudaFreeHost".into(),
            _ => format!("{}{name}", self.prefix()),
        }
    }

    /// The runtime family called `name` (`"cuda"` or `"hip"`).
    pub fn from_name(name: &str) -> Result<Api> {
        match name {
            "cuda" => Ok(Api::Cuda),
            "hip" => Ok(Api::Hip),
            other => Err(Error::invalid(format!(
                "unknown GPU runtime {other:?}; expected \"cuda\" or \"hip\""
            ))),
        }
    }

    /// The memory an allocator on this runtime hands out: CUDA outputs are device
    /// memory filled through pinned staging; HIP outputs are managed memory the
    /// host writes in place, which AMD's integrated and discrete GPUs both map.
    pub fn output_memory(self) -> DeviceKind {
        match self {
            Api::Cuda => DeviceKind::Device,
            Api::Hip => DeviceKind::Managed,
        }
    }

    /// The DLPack device type of this runtime's memory.
    pub fn dl_device_type(self) -> i32 {
        match self {
            Api::Cuda => DL_CUDA,
            Api::Hip => DL_ROCM,
        }
    }
}

type Alloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type AllocFlags = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type Memcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int;
type SetDevice = unsafe extern "C" fn(c_int) -> c_int;
type GetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type DeviceCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

/// A loaded runtime library and the entry points we use.
pub struct Runtime {
    api: Api,
    path: String,
    malloc: Alloc,
    malloc_managed: AllocFlags,
    free: Free,
    host_malloc: AllocFlags,
    host_free: Free,
    memcpy: Memcpy,
    set_device: SetDevice,
    get_device: GetDevice,
    device_count: DeviceCount,
    error_string: ErrorString,
    // Last, so that it is dropped (unloaded) after nothing can call into it.
    _lib: Library,
}

fn bind<T: Copy>(lib: &Library, api: Api, name: &str, path: &str) -> Result<T> {
    let symbol = api.symbol(name);
    // SAFETY: every symbol is bound with the signature the runtime documents for it.
    let f = unsafe { lib.get::<T>(symbol.as_bytes()) }.map_err(|e| {
        Error::Device(format!(
            "{path} is not a usable {} runtime: {symbol}: {e}",
            api.prefix().to_uppercase()
        ))
    })?;
    Ok(*f)
}

impl Runtime {
    /// Loads the runtime library at `path` and binds the entry points an allocator uses.
    pub fn load(api: Api, path: &Path) -> Result<Arc<Runtime>> {
        let shown = path.display().to_string();
        // SAFETY: loading a GPU runtime runs its initialisers, which is what using
        // it means; the caller chose the library.
        let lib = unsafe { Library::new(path) }
            .map_err(|e| Error::Device(format!("cannot load {shown}: {e}")))?;
        Ok(Arc::new(Runtime {
            api,
            malloc: bind(&lib, api, "Malloc", &shown)?,
            malloc_managed: bind(&lib, api, "MallocManaged", &shown)?,
            free: bind(&lib, api, "Free", &shown)?,
            host_malloc: bind(&lib, api, "HostMalloc", &shown)?,
            host_free: bind(&lib, api, "HostFree", &shown)?,
            memcpy: bind(&lib, api, "Memcpy", &shown)?,
            set_device: bind(&lib, api, "SetDevice", &shown)?,
            get_device: bind(&lib, api, "GetDevice", &shown)?,
            device_count: bind(&lib, api, "GetDeviceCount", &shown)?,
            error_string: bind(&lib, api, "GetErrorString", &shown)?,
            path: shown,
            _lib: lib,
        }))
    }

    /// The runtime family of the library.
    pub fn api(&self) -> Api {
        self.api
    }

    /// The library that was loaded, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn check(&self, code: c_int, what: &str) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: the runtime returns a static string (or null) for any code.
        let msg = unsafe { (self.error_string)(code) };
        let msg = if msg.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: a non-null result is a NUL-terminated static string.
            unsafe { CStr::from_ptr(msg) }
                .to_string_lossy()
                .into_owned()
        };
        Err(Error::Device(format!(
            "{what} failed: {msg} (error {code} from {})",
            self.path
        )))
    }

    /// Devices the runtime reports.
    pub fn device_count(&self) -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer.
        self.check(unsafe { (self.device_count)(&mut n) }, "counting devices")?;
        Ok(n.max(0) as usize)
    }

    /// Runs `f` with `device` current on the calling thread, then makes the
    /// caller's device current again: runtimes keep the current device per
    /// thread, and a library must not move its caller's (a framework would then
    /// put its own allocations on our device).
    fn on_device<T>(&self, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut before: c_int = 0;
        // SAFETY: `before` is a valid out-pointer.
        self.check(
            unsafe { (self.get_device)(&mut before) },
            "reading the current device",
        )?;
        if before == device {
            return f();
        }
        // SAFETY: plain call; the runtime validates the id.
        self.check(
            unsafe { (self.set_device)(device) },
            &format!("selecting device {device}"),
        )?;
        let out = f();
        // SAFETY: `before` was current a moment ago, so it is valid.
        let _ = unsafe { (self.set_device)(before) };
        out
    }

    /// `cap` bytes of `what` from `call`, an allocation entry point given the
    /// out-pointer, made with `device` current.
    fn allocate(
        &self,
        device: i32,
        cap: usize,
        what: &str,
        call: impl FnOnce(*mut *mut c_void) -> c_int,
    ) -> Result<NonNull<u8>> {
        self.on_device(device, || {
            let mut p: *mut c_void = std::ptr::null_mut();
            self.check(call(&mut p), &format!("allocating {cap} bytes of {what}"))?;
            NonNull::new(p.cast::<u8>())
                .ok_or_else(|| Error::Device(format!("{} returned no {what}", self.path)))
        })
    }

    /// Frees `ptr` with `free` on `device`. A failure can only leak, and there is
    /// no caller to report it to.
    fn release(&self, device: i32, free: Free, ptr: NonNull<u8>) {
        let _ = self.on_device(device, || {
            // SAFETY: `ptr` came from the allocator that `free` belongs to.
            let _ = unsafe { free(ptr.as_ptr().cast()) };
            Ok(())
        });
    }

    /// Copies `src` to device memory at `dst`; returns once the copy is done, so
    /// `src` may be reused at once (the runtimes complete a copy from pinned host
    /// memory before they return).
    pub fn copy_to_device(&self, device: i32, dst: *mut u8, src: &[u8]) -> Result<()> {
        self.on_device(device, || {
            // SAFETY: `dst` holds at least `src.len()` bytes of device memory (the
            // caller's block) and `src` is valid for reads.
            let code = unsafe {
                (self.memcpy)(
                    dst.cast(),
                    src.as_ptr().cast(),
                    src.len(),
                    MEMCPY_HOST_TO_DEVICE,
                )
            };
            self.check(code, &format!("copying {} bytes to the device", src.len()))
        })
    }
}

/// How a device pool allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// Device memory the host cannot address: outputs are staged and copied.
    Device,
    /// Managed memory the device consumes and the host may also write.
    Managed,
}

/// Regions of one device's memory.
pub struct DeviceMemory {
    pub runtime: Arc<Runtime>,
    pub device: i32,
    pub kind: DeviceKind,
}

impl Backing for DeviceMemory {
    fn alloc(&self, cap: usize) -> Result<NonNull<u8>> {
        let rt = &self.runtime;
        // SAFETY: the runtime receives a valid out-pointer.
        rt.allocate(self.device, cap, "device memory", |p| unsafe {
            match self.kind {
                DeviceKind::Device => (rt.malloc)(p, cap),
                DeviceKind::Managed => (rt.malloc_managed)(p, cap, MEM_ATTACH_GLOBAL),
            }
        })
    }

    fn free(&self, ptr: NonNull<u8>, _cap: usize) {
        self.runtime.release(self.device, self.runtime.free, ptr);
    }

    fn device(&self) -> (i32, i32) {
        (self.runtime.api.dl_device_type(), self.device)
    }

    fn host_accessible(&self) -> bool {
        self.kind == DeviceKind::Managed
    }
}

/// Page-locked host memory, the staging area of copies to a device.
pub struct PinnedMemory {
    pub runtime: Arc<Runtime>,
    pub device: i32,
}

impl Backing for PinnedMemory {
    fn alloc(&self, cap: usize) -> Result<NonNull<u8>> {
        let rt = &self.runtime;
        // SAFETY: the runtime receives a valid out-pointer; flags 0 is the default.
        rt.allocate(self.device, cap, "pinned host memory", |p| unsafe {
            (rt.host_malloc)(p, cap, 0)
        })
    }

    fn free(&self, ptr: NonNull<u8>, _cap: usize) {
        self.runtime
            .release(self.device, self.runtime.host_free, ptr);
    }

    fn device(&self) -> (i32, i32) {
        (crate::pool::DL_CPU, 0)
    }

    fn host_accessible(&self) -> bool {
        true
    }
}
