/* A stand-in for the CUDA and HIP runtimes, so that the GPU allocators can be
 * tested on a machine without a GPU. "Device" memory is host memory, which lets
 * the tests read what a gather put there. FAKE_GPU_DEVICES sets the device count
 * (default 1; 0 makes counting fail as on a machine without a GPU). The fake_*
 * functions report what the library was asked to do. */

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, ERR_MEMORY = 2, ERR_INVALID_VALUE = 1, ERR_NO_DEVICE = 100, ERR_INVALID_DEVICE = 101 };

static atomic_long live_device, live_pinned, copies, copied_bytes;
static _Thread_local int current_device;

static int device_count(void) {
    const char *s = getenv("FAKE_GPU_DEVICES");
    return s ? atoi(s) : 1;
}

static int alloc(void **p, size_t size, atomic_long *live) {
    if (!p) return ERR_INVALID_VALUE;
    size_t cap = (size + 255) / 256 * 256;
    *p = aligned_alloc(256, cap ? cap : 256);
    if (!*p) return ERR_MEMORY;
    atomic_fetch_add(live, 1);
    return OK;
}

static int release(void *p, atomic_long *live) {
    if (p) {
        free(p);
        atomic_fetch_sub(live, 1);
    }
    return OK;
}

static int count(int *n) {
    int d = device_count();
    if (d <= 0) return ERR_NO_DEVICE;
    *n = d;
    return OK;
}

static int set_device(int d) {
    if (d < 0 || d >= device_count()) return ERR_INVALID_DEVICE;
    current_device = d;
    return OK;
}

static int get_device(int *d) {
    *d = current_device;
    return OK;
}

static int copy(void *dst, const void *src, size_t n, int kind) {
    if (kind != 1) return ERR_INVALID_VALUE; /* only host to device is expected */
    memcpy(dst, src, n);
    atomic_fetch_add(&copies, 1);
    atomic_fetch_add(&copied_bytes, (long)n);
    return OK;
}

static const char *error_string(int code) {
    switch (code) {
    case OK: return "no error";
    case ERR_MEMORY: return "out of memory";
    case ERR_NO_DEVICE: return "no GPU device is present";
    case ERR_INVALID_DEVICE: return "invalid device ordinal";
    default: return "invalid argument";
    }
}

int cudaMalloc(void **p, size_t n) { return alloc(p, n, &live_device); }
int cudaMallocManaged(void **p, size_t n, unsigned f) { (void)f; return alloc(p, n, &live_device); }
int cudaFree(void *p) { return release(p, &live_device); }
int cudaHostAlloc(void **p, size_t n, unsigned f) { (void)f; return alloc(p, n, &live_pinned); }
int cudaFreeHost(void *p) { return release(p, &live_pinned); }
int cudaMemcpy(void *d, const void *s, size_t n, int k) { return copy(d, s, n, k); }
int cudaSetDevice(int d) { return set_device(d); }
int cudaGetDevice(int *d) { return get_device(d); }
int cudaGetDeviceCount(int *n) { return count(n); }
const char *cudaGetErrorString(int c) { return error_string(c); }

int hipMalloc(void **p, size_t n) { return alloc(p, n, &live_device); }
int hipMallocManaged(void **p, size_t n, unsigned f) { (void)f; return alloc(p, n, &live_device); }
int hipFree(void *p) { return release(p, &live_device); }
int hipHostMalloc(void **p, size_t n, unsigned f) { (void)f; return alloc(p, n, &live_pinned); }
int hipHostFree(void *p) { return release(p, &live_pinned); }
int hipMemcpy(void *d, const void *s, size_t n, int k) { return copy(d, s, n, k); }
int hipSetDevice(int d) { return set_device(d); }
int hipGetDevice(int *d) { return get_device(d); }
int hipGetDeviceCount(int *n) { return count(n); }
const char *hipGetErrorString(int c) { return error_string(c); }

long fake_live_device(void) { return atomic_load(&live_device); }
long fake_live_pinned(void) { return atomic_load(&live_pinned); }
long fake_copies(void) { return atomic_load(&copies); }
long fake_copied_bytes(void) { return atomic_load(&copied_bytes); }
