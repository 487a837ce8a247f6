//! The records whose stored bytes, in the blocks a cache keeps in memory,
//! have matched their checksums: a warm gather hashes each record's bytes
//! once per copy of its block in memory, not once per read.
//!
//! A kept block is this process's own memory, written once when the block
//! was read and never changed after, so bytes that matched once match for as
//! long as that copy lives. A set of passed records is tied to the cache's
//! count of released blocks: a block let go of and read again is another
//! copy, which the set made for the new count knows nothing of.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Records shorter than this are hashed on every read: hashing a few dozen
/// bytes costs less than the cache miss a look at a large set may be.
const MIN_BYTES: usize = 128;

/// Positions per chunk of the set, allocated when one of them first passes:
/// large enough that a new set (one after each block memory lets go of)
/// makes few empty chunks, under a thousand for a billion records.
const CHUNK: u64 = 1 << 20;
const WORDS: usize = (CHUNK / 64) as usize;

/// A set of record positions of one store, by bits in chunks.
pub(crate) struct Passed {
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

impl Passed {
    /// An empty set for a store of `records` records.
    pub(crate) fn new(records: u64) -> Passed {
        let n = usize::try_from(records.div_ceil(CHUNK)).unwrap_or(0);
        Passed {
            chunks: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Whether record `pos`, of `len` stored bytes, has passed.
    #[inline]
    pub(crate) fn holds(&self, pos: u64, len: usize) -> bool {
        if len < MIN_BYTES {
            return false;
        }
        let Some(words) = self.chunk(pos).and_then(OnceLock::get) else {
            return false;
        };
        let (w, bit) = place(pos);
        words[w].load(Ordering::Relaxed) & bit != 0
    }

    /// Adds record `pos`, of `len` stored bytes.
    #[inline]
    pub(crate) fn add(&self, pos: u64, len: usize) {
        if len < MIN_BYTES {
            return;
        }
        let Some(chunk) = self.chunk(pos) else {
            return;
        };
        let words = chunk.get_or_init(|| (0..WORDS).map(|_| AtomicU64::new(0)).collect());
        let (w, bit) = place(pos);
        words[w].fetch_or(bit, Ordering::Relaxed);
    }

    #[inline]
    fn chunk(&self, pos: u64) -> Option<&OnceLock<Box<[AtomicU64]>>> {
        self.chunks.get(usize::try_from(pos / CHUNK).ok()?)
    }
}

/// The word of its chunk and the bit in it of position `pos`.
#[inline]
fn place(pos: u64) -> (usize, u64) {
    (((pos % CHUNK) / 64) as usize, 1 << (pos % 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_added_are_held_and_no_others() {
        let p = Passed::new(3 * CHUNK + 5);
        let some = [0, 63, 64, CHUNK - 1, CHUNK, 3 * CHUNK + 4];
        for &pos in &some {
            assert!(!p.holds(pos, 200));
            p.add(pos, 200);
        }
        for pos in (0..3 * CHUNK + 5).step_by(7).chain(some) {
            assert_eq!(p.holds(pos, 200), some.contains(&pos), "{pos}");
        }
        assert!(p.chunks[2].get().is_none(), "a chunk with none is not made");
        // Past the store: nothing held, nothing added, no fault.
        p.add(3 * CHUNK + 5, 200);
        p.add(u64::MAX, 200);
        assert!(!p.holds(u64::MAX, 200));
    }

    #[test]
    fn short_records_are_never_held() {
        let p = Passed::new(10);
        p.add(3, MIN_BYTES - 1);
        assert!(!p.holds(3, MIN_BYTES - 1));
        assert!(!p.holds(3, MIN_BYTES), "not added");
        p.add(3, MIN_BYTES);
        assert!(p.holds(3, MIN_BYTES));
        assert!(!p.holds(3, MIN_BYTES - 1), "hashed whatever the set says");
    }
}
