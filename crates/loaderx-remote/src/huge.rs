//! Memory for the blocks kept whole in memory (the cache's data blocks, the
//! index's blocks), in 2 MiB regions the kernel is asked to back with huge
//! pages.
//!
//! A warm gather of small records touches a few bytes in each of hundreds of
//! kept blocks: in ordinary 4 KiB pages nearly every record costs a page walk
//! besides its cache miss, which a local store's mapped files (often backed by
//! large folios) do not pay. A huge page holds two data blocks of the default
//! 1 MiB, or 32 index blocks, so a block of more than half of a slot size
//! from `MIN_SLOT` to 2 MiB (a power of two) is placed in a slot of such a
//! region. Smaller and larger blocks get ordinary memory.
//!
//! A region lives as long as one of its blocks does, so the memory held can
//! exceed the bytes of the blocks kept; but free slots are filled before a
//! region is added, so a region is added only when every region of its slot
//! size is full: the memory held for a slot size never exceeds the most bytes
//! of its blocks ever kept at once, plus `SPARE` regions. A region whose last
//! block goes is kept for the next blocks while fewer than `SPARE` empty ones
//! are, else given back: a block read for one gather and let go of at once
//! would otherwise cost a fresh region, its 2 MiB zeroed by the kernel, where
//! the heap reuses freed memory as it is.
//!
//! Where a fresh huge page is slow to come by (a virtual machine whose host
//! takes free memory back, as a balloon device's free page reporting does, so
//! that each new 2 MiB page is the host's to find and zero, milliseconds
//! where zeroing alone takes a fraction of one), reading blocks into new
//! regions would slow a cold pass more than the page walks it saves
//! (docs/benchmarks.md, "At scale"). Each new region's first byte is written when
//! it is mapped, and timed: after `SLOW_TOUCHES` touches slower than
//! `SLOW_TOUCH`, no new block is given a slot, and blocks get ordinary memory
//! for the rest of the process.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

/// Bytes of a region: one huge page on x86-64 and arm64 with 4 KiB pages.
const REGION: usize = 2 << 20;
/// A new region's first touch slower than this is a slow one.
const SLOW_TOUCH: Duration = Duration::from_millis(2);
/// Slow touches after which new blocks get ordinary memory: two, so that one
/// preempted touch does not decide.
const SLOW_TOUCHES: usize = 2;

/// Slow touches of new regions so far in this process.
static SLOW: AtomicUsize = AtomicUsize::new(0);

/// Counts a new region's first touch that took `took` in `slow`; whether
/// regions are still worth making.
fn touched(took: Duration, slow: &AtomicUsize) -> bool {
    if took > SLOW_TOUCH {
        slow.fetch_add(1, Ordering::Relaxed);
    }
    worth_it(slow)
}

fn worth_it(slow: &AtomicUsize) -> bool {
    slow.load(Ordering::Relaxed) < SLOW_TOUCHES
}

/// Empty regions kept per slot size.
const SPARE: usize = 4;

/// The smallest slot: an index block's 64 KiB. Blocks of half of it or less
/// lie in a few pages anyway.
const MIN_SLOT: usize = 64 << 10;

/// One 2 MiB-aligned mapping of `REGION` bytes.
struct Region {
    base: NonNull<u8>,
    /// Slots in use.
    used: usize,
}

// SAFETY: a region is plain anonymous memory; its slots are handed out one
// block each, and the region is unmapped only when no block refers to it.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// A new region, or `None` if the memory is not there.
    fn map() -> Option<Region> {
        let len = 2 * REGION;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let start = p as usize;
        let aligned = start.next_multiple_of(REGION);
        let (head, tail) = (aligned - start, start + len - (aligned + REGION));
        // SAFETY: the head and tail are the parts of the mapping just made
        // outside the aligned region, which nothing refers to. A failed
        // advice only costs the huge pages.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((aligned + REGION) as *mut libc::c_void, tail);
            }
            libc::madvise(aligned as *mut libc::c_void, REGION, libc::MADV_HUGEPAGE);
        }
        let at = Instant::now();
        // SAFETY: the first byte of the region just mapped, writable.
        unsafe { std::ptr::write_volatile(aligned as *mut u8, 0) };
        touched(at.elapsed(), &SLOW);
        Some(Region {
            base: NonNull::new(aligned as *mut u8)?,
            used: 0,
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the region's mapping, which no block refers to any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), REGION) };
    }
}

/// The regions of one slot size with a free slot, and those slots.
struct Class {
    free: Vec<(Arc<Mutex<Region>>, usize)>,
    /// Regions among them with no slot in use.
    empty: usize,
}

/// One list per slot size, `MIN_SLOT` to `REGION` in powers of two.
static CLASSES: [Mutex<Class>; 6] = [const {
    Mutex::new(Class {
        free: Vec::new(),
        empty: 0,
    })
}; 6];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slot size a block of `len` bytes takes, and its class; `None` for a
/// block that gets ordinary memory.
fn class_of(len: usize) -> Option<(usize, usize)> {
    let slot = len.checked_next_power_of_two()?;
    (MIN_SLOT..=REGION)
        .contains(&slot)
        .then(|| (slot, (slot / MIN_SLOT).trailing_zeros() as usize))
}

/// A block's slot: `len` bytes at slot `index` of `region`.
struct Slot {
    region: Arc<Mutex<Region>>,
    ptr: NonNull<u8>,
    index: usize,
    len: usize,
    class: usize,
}

// SAFETY: the slot's bytes are written once before it is shared, then only
// read; the region outlives the slot through the `Arc`.
unsafe impl Send for Slot {}
unsafe impl Sync for Slot {}

impl AsRef<[u8]> for Slot {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` lies in the slot, inside the mapped region
        // this slot keeps alive, and was written before the slot was shared.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut class = lock(&CLASSES[self.class]);
        let used = {
            let mut r = lock(&self.region);
            r.used -= 1;
            r.used
        };
        if used == 0 && class.empty >= SPARE {
            // The region's last block: its free slots leave the list, and the
            // region is unmapped when the last reference (this one) goes.
            class.free.retain(|(r, _)| !Arc::ptr_eq(r, &self.region));
        } else {
            class.empty += usize::from(used == 0);
            class.free.push((self.region.clone(), self.index));
        }
    }
}

/// A free slot of size `slot` (class `class`), from a region with one free
/// if any, else from a new region; `None` if the memory is not there.
fn take(slot: usize, class: usize) -> Option<(Arc<Mutex<Region>>, usize)> {
    let mut c = lock(&CLASSES[class]);
    let (region, index) = match c.free.pop() {
        Some((region, index)) => {
            if lock(&region).used == 0 {
                c.empty -= 1;
            }
            (region, index)
        }
        None => {
            let region = Arc::new(Mutex::new(Region::map()?));
            c.free
                .extend((1..REGION / slot).rev().map(|i| (region.clone(), i)));
            (region, 0)
        }
    };
    lock(&region).used += 1;
    Some((region, index))
}

/// `len` bytes of `f` from its start, as a block kept whole; `None` if the
/// file is shorter now or the memory is not there.
pub(crate) fn read_block(f: &File, len: u64) -> Option<Bytes> {
    let n = usize::try_from(len).ok()?;
    match class_of(n).filter(|_| worth_it(&SLOW)) {
        Some(_) => filled(n, |buf| f.read_exact_at(buf, 0).is_ok()),
        None => read_fresh(f, n).map(Bytes::from),
    }
}

/// A copy of `bytes` as a block kept whole; `None` if the memory is not there.
pub(crate) fn copied(bytes: &[u8]) -> Option<Bytes> {
    match class_of(bytes.len()).filter(|_| worth_it(&SLOW)) {
        Some(_) => filled(bytes.len(), |buf| {
            buf.copy_from_slice(bytes);
            true
        }),
        None => Some(Bytes::copy_from_slice(bytes)),
    }
}

/// `n` bytes of `f` from its start in ordinary memory, read into it as the
/// kernel hands it over: pages a process has not used before come zeroed,
/// and zeroing them again before the read (as a buffer of initialized bytes
/// would be) doubled the passes over memory that a new process reading a
/// window of blocks from the cache pays most for. `None` if the file is
/// shorter or the memory is not there.
fn read_fresh(f: &File, n: usize) -> Option<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut buf: Vec<u8> = Vec::new();
    buf.try_reserve_exact(n).ok()?;
    let mut done = 0;
    while done < n {
        let at = libc::off_t::try_from(done).ok()?;
        let spare = &mut buf.spare_capacity_mut()[done..n];
        // SAFETY: `pread` writes at most `spare.len()` bytes at `spare`, which
        // lies in this vector's allocation past its length.
        let got = unsafe { libc::pread(f.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at) };
        match got {
            0 => return None,
            g if g > 0 => done += g as usize,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return None,
        }
    }
    // SAFETY: the loop above ended with `done == n`: `pread` wrote every one
    // of the first `n` bytes.
    unsafe { buf.set_len(n) };
    Some(buf)
}

/// `n` bytes that `fill` writes (`false`: it failed, and nothing is made), in
/// a region's slot; `None` where `n` has no slot size or the memory is not
/// there.
fn filled(n: usize, fill: impl FnOnce(&mut [u8]) -> bool) -> Option<Bytes> {
    let (size, class) = class_of(n)?;
    let (region, index) = take(size, class)?;
    let base = lock(&region).base;
    // SAFETY: slot `index` of a region of `REGION / size` slots lies inside
    // the region's mapping.
    let ptr = unsafe { NonNull::new_unchecked(base.as_ptr().add(index * size)) };
    let slot = Slot {
        region,
        ptr,
        index,
        len: n,
        class,
    };
    // SAFETY: the slot is this block's alone until it is shared below, and
    // `n <= size` bytes of it lie in the mapping.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), n) };
    // A failed fill drops the slot, which frees it.
    fill(buf).then(|| Bytes::from_owner(slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regions of class `class` with a free slot, and their free slots.
    fn free_of(class: usize) -> (usize, usize) {
        let c = lock(&CLASSES[class]);
        let mut regions: Vec<*const Mutex<Region>> =
            c.free.iter().map(|(r, _)| Arc::as_ptr(r)).collect();
        regions.sort_unstable();
        regions.dedup();
        (regions.len(), c.free.len())
    }

    /// [`read_block`] in a region's slot however slow new regions were.
    fn read_region(f: &File, len: u64) -> Option<Bytes> {
        filled(len as usize, |buf| f.read_exact_at(buf, 0).is_ok())
    }

    fn file_of(bytes: &[u8]) -> (tempfile::TempDir, File) {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("block");
        std::fs::write(&path, bytes).unwrap();
        let f = File::open(&path).unwrap();
        (d, f)
    }

    #[test]
    fn sizes_that_divide_a_region_get_slots_and_others_ordinary_memory() {
        assert_eq!(class_of(1 << 20), Some((1 << 20, 4)));
        assert_eq!(class_of((1 << 20) - 5), Some((1 << 20, 4)));
        assert_eq!(class_of(MIN_SLOT / 2 + 1), Some((MIN_SLOT, 0)));
        assert_eq!(class_of(MIN_SLOT / 2), None);
        assert_eq!(class_of(2 << 20), Some((2 << 20, 5)));
        assert_eq!(class_of((2 << 20) + 1), None);
        assert_eq!(class_of(0), None);
        let (_d, f) = file_of(&[9u8; 3 << 20]);
        assert!(read_region(&f, 3 << 20).is_none(), "no slot of that size");
        let big = read_fresh(&f, 3 << 20).unwrap();
        assert_eq!(big.len(), 3 << 20);
        assert!(big.iter().all(|&b| b == 9));
        assert!(read_fresh(&f, (3 << 20) + 1).is_none(), "past the file");
        assert_eq!(read_fresh(&f, 0).unwrap(), Vec::<u8>::new());
        assert_eq!(&copied(&[5u8; 64 << 10]).unwrap()[..], &[5u8; 64 << 10][..]);
        assert_eq!(&copied(b"small").unwrap()[..], b"small");
        assert_eq!(&read_block(&f, 1 << 20).unwrap()[..], &[9u8; 1 << 20][..]);
    }

    // The one test of the 512 KiB class, so that no other test's slots meet
    // its counts.
    #[test]
    fn blocks_fill_a_regions_slots_first_and_spare_regions_are_kept() {
        let class = class_of(512 << 10).unwrap().1;
        let content: Vec<u8> = (0..512u32 << 10).map(|i| (i % 253) as u8).collect();
        let (_d, f) = file_of(&content);
        let block = || read_region(&f, 512 << 10).unwrap();
        let empty = || lock(&CLASSES[class]).empty;
        assert_eq!(free_of(class), (0, 0));
        let mut blocks: Vec<Bytes> = (0..5).map(|_| block()).collect();
        // Four slots to a region: two regions, three slots of the second free.
        assert_eq!(free_of(class), (1, 3));
        for b in &blocks {
            assert_eq!(&b[..], &content[..]);
            assert_eq!(b.as_ptr() as usize % (512 << 10), 0);
        }
        let region_of = |b: &Bytes| b.as_ptr() as usize / REGION;
        assert!(blocks[..4]
            .iter()
            .all(|b| region_of(b) == region_of(&blocks[0])));
        assert_ne!(region_of(&blocks[4]), region_of(&blocks[0]));
        // A slice outlives the block it was cut from.
        let tail = blocks[1].slice(1000..2000);
        let second = region_of(&blocks[4]);
        drop(blocks.pop());
        assert_eq!((free_of(class), empty()), ((1, 4), 1), "kept, empty");
        drop(blocks.remove(0));
        assert_eq!(free_of(class), (2, 5));
        // The slot freed last is filled first.
        let again = read_region(&f, 300 << 10).unwrap();
        assert_eq!(&again[..], &content[..300 << 10]);
        assert_ne!(region_of(&again), second);
        assert_eq!(free_of(class), (1, 4));
        drop(blocks);
        assert_eq!(&tail[..], &content[1000..2000]);
        drop((tail, again));
        assert_eq!((free_of(class), empty()), ((2, 8), 2));
        // Past SPARE empty regions, a region whose last block goes is unmapped.
        let many: Vec<Bytes> = (0..4 * (SPARE + 2)).map(|_| block()).collect();
        assert_eq!((free_of(class), empty()), ((0, 0), 0));
        drop(many);
        assert_eq!((free_of(class), empty()), ((SPARE, 4 * SPARE), SPARE));
        // A fill that fails frees its slot.
        let (_e, short) = file_of(&content[..100]);
        assert!(read_region(&short, 300 << 10).is_none());
        assert_eq!((free_of(class), empty()), ((SPARE, 4 * SPARE), SPARE));
    }

    #[test]
    fn two_slow_touches_of_new_regions_turn_them_off() {
        let slow = AtomicUsize::new(0);
        assert!(touched(Duration::from_micros(300), &slow));
        assert!(touched(SLOW_TOUCH * 3, &slow), "one may be a preemption");
        assert!(touched(Duration::from_micros(300), &slow));
        assert!(!touched(SLOW_TOUCH * 3, &slow));
        assert!(!touched(Duration::ZERO, &slow), "for good");
    }

    #[test]
    fn blocks_made_and_dropped_on_many_threads_keep_their_bytes() {
        let content: Vec<u8> = (0..1u32 << 20).map(|i| (i % 241) as u8).collect();
        let (_d, f) = file_of(&content);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (f, content) = (&f, &content);
                s.spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..40 {
                        held.push(read_region(f, 1 << 20).unwrap());
                        if (i + t) % 3 == 0 {
                            held.swap_remove(i % held.len());
                        }
                    }
                    for b in &held {
                        assert_eq!(&b[..], &content[..]);
                    }
                });
            }
        });
    }
}
