//! Pooled memory for gather outputs: 64-byte aligned host memory, or regions of a
//! device runtime (`crate::device`).
//!
//! A fresh multi-megabyte allocation per batch costs a page fault per 4 KiB on
//! first touch, which made gathers several times slower in our measurements, and
//! a device allocation costs a runtime call that may synchronize. So released
//! regions go back to a pool keyed by size class and the next batch of the same
//! size reuses them warm. Each `Block` is owned exclusively by whoever holds it;
//! the region returns to the pool only when the block is dropped.

use std::alloc::{alloc, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

use zrecord::ALIGN;

/// DLPack's device type of ordinary host memory.
pub const DL_CPU: i32 = 1;

/// Where a pool's regions come from.
pub trait Backing: Send + Sync {
    /// A region of exactly `cap` bytes (a size class), aligned to at least `ALIGN`.
    fn alloc(&self, cap: usize) -> Result<NonNull<u8>>;
    /// Returns a region `alloc` gave out, with the same `cap`.
    fn free(&self, ptr: NonNull<u8>, cap: usize);
    /// The DLPack `(device type, device id)` of the regions.
    fn device(&self) -> (i32, i32);
    /// Whether this process may read and write the regions through their address.
    fn host_accessible(&self) -> bool;
}

/// Ordinary host memory from the global allocator.
pub struct HostMemory;

impl Backing for HostMemory {
    fn alloc(&self, cap: usize) -> Result<NonNull<u8>> {
        let lay =
            layout(cap).ok_or_else(|| Error::invalid(format!("cannot allocate {cap} bytes")))?;
        // SAFETY: `lay` has non-zero size (every size class is >= ALIGN).
        NonNull::new(unsafe { alloc(lay) })
            .ok_or(Error::Store(zrecord::Error::OutOfMemory { bytes: cap }))
    }

    fn free(&self, ptr: NonNull<u8>, cap: usize) {
        if let Some(lay) = layout(cap) {
            // SAFETY: the region was allocated with exactly this layout.
            unsafe { dealloc(ptr.as_ptr(), lay) }
        }
    }

    fn device(&self) -> (i32, i32) {
        (DL_CPU, 0)
    }

    fn host_accessible(&self) -> bool {
        true
    }
}

/// Idle bytes a pool keeps by default before it frees released regions instead.
pub const DEFAULT_IDLE_LIMIT: usize = 1 << 30;

struct Region(NonNull<u8>);
// SAFETY: a region is plain memory owned by exactly one holder at a time.
unsafe impl Send for Region {}

#[derive(Default)]
struct State {
    free: BTreeMap<usize, Vec<Region>>,
    idle_bytes: usize,
    live: usize,
    live_bytes: usize,
    closed: bool,
}

/// Regions of one backing, reused by size class; shared by every block it handed out.
pub struct Pool {
    state: Mutex<State>,
    idle_limit: usize,
    backing: Box<dyn Backing>,
}

/// Usage figures of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Blocks handed out and not yet dropped.
    pub live: usize,
    /// Bytes of those blocks' regions.
    pub live_bytes: usize,
    /// Bytes of released regions kept for reuse.
    pub idle_bytes: usize,
}

/// The capacity actually allocated for a request of `len` bytes: small sizes round
/// to 4 KiB, larger ones to 1/8 of their power of two, so that batches of nearly
/// the same size share regions while wasting at most 12.5%.
/// None when the class would not fit an allocation (`isize::MAX` bytes).
pub fn size_class(len: usize) -> Option<usize> {
    let len = len.max(ALIGN);
    let cap = if len <= 64 << 10 {
        len.div_ceil(4096) * 4096
    } else {
        let step = 1usize << (usize::BITS - 1 - len.leading_zeros() - 3);
        len.div_ceil(step).checked_mul(step)?
    };
    (cap <= isize::MAX as usize).then_some(cap)
}

fn layout(cap: usize) -> Option<Layout> {
    Layout::from_size_align(cap, ALIGN).ok()
}

impl Pool {
    /// A pool of host memory that keeps up to `idle_limit` released bytes.
    pub fn host(idle_limit: usize) -> Arc<Pool> {
        Pool::new(Box::new(HostMemory), idle_limit)
    }

    /// A pool of `backing`'s regions that keeps at most `idle_limit` released bytes.
    pub fn new(backing: Box<dyn Backing>, idle_limit: usize) -> Arc<Pool> {
        Arc::new(Pool {
            state: Mutex::new(State::default()),
            idle_limit,
            backing,
        })
    }

    /// The DLPack `(device type, device id)` of the regions.
    pub fn device(&self) -> (i32, i32) {
        self.backing.device()
    }

    /// Whether this process may read and write the regions.
    pub fn host_accessible(&self) -> bool {
        self.backing.host_accessible()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A region of at least `len` bytes, exclusively the caller's until dropped.
    pub fn acquire(self: &Arc<Self>, len: usize) -> Result<Block> {
        let cap = size_class(len)
            .ok_or_else(|| Error::invalid(format!("cannot allocate {len} bytes: too large")))?;
        let mut st = self.lock();
        if st.closed {
            return Err(Error::invalid("the allocator is closed"));
        }
        // The smallest idle region of this class or up to half as large again:
        // batches of variable-size records rarely repeat a class exactly, and a
        // fresh region costs a page fault per 4 KiB on first touch.
        let fit = st
            .free
            .range_mut(cap..=cap.saturating_add(cap / 2))
            .find_map(|(&c, v)| v.pop().map(|r| (c, r)));
        let (ptr, cap) = match fit {
            Some((c, r)) => {
                st.idle_bytes -= c;
                (r.0, c)
            }
            None => {
                drop(st);
                let p = self.backing.alloc(cap)?;
                st = self.lock();
                (p, cap)
            }
        };
        st.live += 1;
        st.live_bytes += cap;
        Ok(Block {
            ptr,
            len,
            cap,
            pool: self.clone(),
        })
    }

    fn release(&self, ptr: NonNull<u8>, cap: usize) {
        let mut st = self.lock();
        st.live -= 1;
        st.live_bytes -= cap;
        if !st.closed && st.idle_bytes + cap <= self.idle_limit {
            st.idle_bytes += cap;
            st.free.entry(cap).or_default().push(Region(ptr));
            return;
        }
        drop(st);
        self.backing.free(ptr, cap);
    }

    /// Frees idle regions and refuses new requests. Live blocks stay valid and are
    /// freed when their holders drop them.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.idle_bytes = 0;
        let free = std::mem::take(&mut st.free);
        drop(st);
        for (cap, regions) in free {
            for r in regions {
                self.backing.free(r.0, cap);
            }
        }
    }

    /// Whether [`Pool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Live and idle counts, for tests and tuning.
    pub fn stats(&self) -> PoolStats {
        let st = self.lock();
        PoolStats {
            live: st.live,
            live_bytes: st.live_bytes,
            idle_bytes: st.idle_bytes,
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (cap, regions) in std::mem::take(&mut st.free) {
            for r in regions {
                self.backing.free(r.0, cap);
            }
        }
    }
}

/// An exclusively owned region of pooled memory.
pub struct Block {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    pool: Arc<Pool>,
}

// SAFETY: the block owns its region; shared access is read-only through &Block.
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

impl Block {
    /// Bytes the block was asked for (its region may be larger).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region's address (a device address for device memory).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The pool the region returns to.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The region's bytes; an invalid-argument error when this process cannot address them.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        if !self.pool.host_accessible() {
            return Err(Error::invalid("this memory is not addressable by the host"));
        }
        // SAFETY: the region holds at least `len` bytes, the backing says the CPU
        // may access it, and `&mut self` is unique.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        self.pool.release(self.ptr, self.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_the_request_with_bounded_waste() {
        for len in [
            0,
            1,
            63,
            64,
            4097,
            65536,
            65537,
            1 << 20,
            (1 << 20) + 1,
            38_535_168,
        ] {
            let c = size_class(len).unwrap();
            assert!(c >= len.max(ALIGN));
            assert!(c % ALIGN == 0);
            if len > 65536 {
                assert!((c - len) * 8 <= len, "{len} -> {c}");
            }
        }
    }

    #[test]
    fn requests_too_large_to_allocate_are_errors() {
        assert_eq!(size_class(usize::MAX), None);
        assert_eq!(size_class(isize::MAX as usize + 1), None);
        let pool = Pool::host(DEFAULT_IDLE_LIMIT);
        drop(pool.acquire(1 << 20).unwrap()); // an idle region, so the range search runs
        for len in [usize::MAX, 11 << 60] {
            assert!(
                matches!(pool.acquire(len), Err(Error::Store(zrecord::Error::InvalidArgument(m))) if m.contains("too large"))
            );
        }
    }

    #[test]
    fn regions_are_reused_only_after_release() {
        let pool = Pool::host(DEFAULT_IDLE_LIMIT);
        let mut a = pool.acquire(1000).unwrap();
        a.as_mut_slice().unwrap().fill(7);
        let b = pool.acquire(1000).unwrap();
        assert_ne!(a.as_ptr(), b.as_ptr());
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        let pa = a.as_ptr();
        drop(a);
        assert_eq!(pool.stats().live, 1);
        let c = pool.acquire(900).unwrap();
        assert_eq!(c.as_ptr(), pa);
        // A released larger region serves a somewhat smaller request.
        let big = pool.acquire(1 << 20).unwrap();
        let pbig = big.as_ptr();
        drop(big);
        let near = pool.acquire(800_000).unwrap();
        assert_eq!(near.as_ptr(), pbig);
        drop(near);
        let far = pool.acquire(100_000).unwrap();
        assert_ne!(far.as_ptr(), pbig);
        drop(far);
        pool.close();
        assert!(pool.acquire(10).is_err());
        drop((b, c));
        assert_eq!(
            pool.stats(),
            PoolStats {
                live: 0,
                live_bytes: 0,
                idle_bytes: 0
            }
        );
    }
}
