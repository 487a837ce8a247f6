//! WINDOWED: locality-aware shuffling, a pure function of the step.
//!
//! The positions `[0, length)` are cut into windows of `window` consecutive
//! positions (the last may be shorter), about `window_bytes` of the store each
//! (its index entries and its data), aligned to groups of records whose entries
//! and data fill about one cache block. Every pass over the
//! records visits the windows in a fresh keyed order and the records of each
//! window in a fresh keyed order, so a pass returns every record exactly once and
//! reads the store a window at a time. Draw `n = step * batch + i` (exact) is slot
//! `n mod length` of pass `n / length`: batches straddle passes and nothing is
//! omitted. Both orders are CYCLIC's Feistel network with their own keys, so a
//! draw costs O(1) and no length-sized table exists. `docs/sampler.md`, section
//! "WINDOWED", defines it bit for bit.

use crate::{fill_permuted, mix32, stream_key, Error, Feistel, Result};

/// Domain separation of the keys of each pass's order of windows.
pub const TAG_WINDOW_ORDER: u64 = 0x6C78_2E77_6E64_0004;
/// Domain separation of the keys of each window's order of records.
pub const TAG_WINDOW_RECORDS: u64 = 0x6C78_2E77_6E72_0005;
/// The default number of bytes one window spans (256 MiB).
pub const DEFAULT_WINDOW_BYTES: u64 = 256 << 20;

impl Feistel {
    /// The inverse of [`Feistel::network`]: the rounds in reverse order.
    #[inline(always)]
    fn network_inverse(&self, mut left: u32, mut right: u32) -> (u32, u32) {
        for &k in self.keys.iter().rev() {
            let prev = right ^ (mix32(left ^ k) & self.mask);
            right = left;
            left = prev;
        }
        (left, right)
    }

    fn round_trip_inverse(&self, x: u64) -> u64 {
        let h = self.half_bits;
        let (left, right) = self.network_inverse((x >> h) as u32, (x as u32) & self.mask);
        ((left as u64) << h) | right as u64
    }

    /// The position that [`Feistel::permute`] maps to `value`; `None` when out of
    /// range.
    pub fn unpermute(&self, value: u64) -> Option<u64> {
        if value >= self.length {
            return None;
        }
        // The inverse of a cycle walk is the walk of the inverse network.
        let mut x = self.round_trip_inverse(value);
        while x >= self.length {
            x = self.round_trip_inverse(x);
        }
        Some(x)
    }
}

/// A validated WINDOWED definition; [`Windowed::fill`] writes the batch of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Windowed {
    length: u64,
    data_bytes: u64,
    index_bytes: u64,
    block_bytes: u64,
    window_bytes: u64,
    batch: usize,
    seed: u64,
    /// Positions per group (about one block of records).
    group: u64,
    /// Positions per window but the last.
    window: u64,
    /// Windows per pass.
    windows: u64,
    /// Positions of the last window, in `1..=window`.
    last: u64,
}

/// Where slot `k` of a pass lies: window `window` (of `size` positions), at
/// `offset` within it.
struct Slot {
    window: u64,
    offset: u64,
    size: u64,
}

/// One pass's order of windows and the place of the short last window in it.
struct PassOrder {
    pass: u64,
    order: Feistel,
    last_place: u64,
}

impl Windowed {
    /// Checks the arguments once so that [`Windowed::fill`] only computes.
    ///
    /// `length` records hold `data_bytes` bytes of data and `index_bytes` of
    /// index entries in all; with `T = data_bytes + index_bytes` (exact),
    /// groups are runs of `max(1, floor(block_bytes * length / T))` positions
    /// (`length` when `T` is 0, never more than `length`), and a window is
    /// `max(1, window_bytes / block_bytes)` groups. Counting the index too
    /// keeps a window's index blocks within `window_bytes` where records are
    /// tiny and their entries outweigh them.
    pub fn new(
        length: u64,
        data_bytes: u64,
        index_bytes: u64,
        block_bytes: u64,
        window_bytes: u64,
        batch: usize,
        seed: u64,
    ) -> Result<Windowed> {
        if length == 0 {
            return Err(Error("length must be at least 1".into()));
        }
        if batch == 0 {
            return Err(Error("batch_size must be at least 1".into()));
        }
        if block_bytes == 0 {
            return Err(Error("block_bytes must be at least 1".into()));
        }
        if window_bytes == 0 {
            return Err(Error("window_bytes must be at least 1".into()));
        }
        u64::try_from(batch).map_err(|_| Error("batch_size does not fit in 64 bits".into()))?;
        let n = u128::from(length);
        let group = match u128::from(data_bytes) + u128::from(index_bytes) {
            0 => n,
            d => (u128::from(block_bytes) * n / d).clamp(1, n),
        };
        let groups_per_window = u128::from((window_bytes / block_bytes).max(1));
        // group <= length, so the window fits in 64 bits once capped.
        let window = (groups_per_window * group).min(n) as u64;
        let windows = length.div_ceil(window);
        let last = length - (windows - 1) * window;
        Ok(Windowed {
            length,
            data_bytes,
            index_bytes,
            block_bytes,
            window_bytes,
            batch,
            seed,
            group: group as u64,
            window,
            windows,
            last,
        })
    }

    /// Records in the store; positions are drawn from `[0, length)`.
    pub fn length(&self) -> u64 {
        self.length
    }
    /// The store's data bytes the groups are sized from.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }
    /// The store's index bytes the groups are sized from.
    pub fn index_bytes(&self) -> u64 {
        self.index_bytes
    }
    /// The block size the groups are sized to.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }
    /// The bytes a window spans, about.
    pub fn window_bytes(&self) -> u64 {
        self.window_bytes
    }
    /// Positions per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// The key of every order.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// Positions per group.
    pub fn group(&self) -> u64 {
        self.group
    }
    /// Positions per window (the last window may hold fewer).
    pub fn window(&self) -> u64 {
        self.window
    }
    /// Windows per pass.
    pub fn windows(&self) -> u64 {
        self.windows
    }

    fn pass_order(&self, pass: u64) -> Result<PassOrder> {
        let order = Feistel::keyed(self.windows, stream_key(self.seed, TAG_WINDOW_ORDER, pass))?;
        let last_place = order
            .unpermute(self.windows - 1)
            .ok_or_else(|| Error("the last window has no place in the order".into()))?;
        Ok(PassOrder {
            pass,
            order,
            last_place,
        })
    }

    /// Where slot `k < length` of the pass ordered by `p` lies.
    fn locate(&self, p: &PassOrder, k: u64) -> Result<Slot> {
        let s = self.window;
        // Places before the short window hold full windows, then the short
        // window, then full windows again.
        let short_start = p.last_place * s;
        let (place, offset) = if k < short_start {
            (k / s, k % s)
        } else if k - short_start < self.last {
            return Ok(Slot {
                window: self.windows - 1,
                offset: k - short_start,
                size: self.last,
            });
        } else {
            let after = k - self.last;
            (after / s + 1, after % s)
        };
        let window = p
            .order
            .permute(place)
            .ok_or_else(|| Error(format!("window place {place} is out of range")))?;
        Ok(Slot {
            window,
            offset,
            size: s,
        })
    }

    /// Writes the batch of `step` into `out`, which must hold exactly `batch` items.
    pub fn fill(&self, step: u64, out: &mut [u64]) -> Result<()> {
        if out.len() != self.batch {
            return Err(Error(format!(
                "output holds {} items, the batch size is {}",
                out.len(),
                self.batch
            )));
        }
        let length = u128::from(self.length);
        // Exact: step * batch < 2^128. Passes are numbered modulo 2^64.
        let first = u128::from(step) * out.len() as u128;
        let mut pass = (first / length) as u64;
        let mut k = (first % length) as u64;
        let mut order = self.pass_order(pass)?;
        let mut done = 0usize;
        while done < out.len() {
            if order.pass != pass {
                order = self.pass_order(pass)?;
            }
            let slot = self.locate(&order, k)?;
            // The run left in this window, bounded by what the batch still needs.
            let left = (slot.size - slot.offset).min((out.len() - done) as u64) as usize;
            let key = stream_key(
                stream_key(self.seed, TAG_WINDOW_RECORDS, pass),
                0,
                slot.window,
            );
            let records = Feistel::keyed(slot.size, key)?;
            let run = &mut out[done..done + left];
            fill_permuted(&records, slot.offset, run);
            let base = slot.window * self.window;
            for v in run.iter_mut() {
                *v += base;
            }
            done += left;
            k += left as u64;
            if k == self.length {
                k = 0;
                pass = pass.wrapping_add(1);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(s: &Windowed, step: u64) -> Vec<u64> {
        let mut out = vec![0u64; s.batch()];
        s.fill(step, &mut out).expect("fill");
        out
    }

    #[test]
    fn unpermute_inverts_permute() {
        for n in [1u64, 2, 3, 5, 17, 100, 4097, 65_537] {
            let f = Feistel::keyed(n, 12345).expect("f");
            for p in 0..n {
                let v = f.permute(p).expect("v");
                assert_eq!(f.unpermute(v), Some(p));
            }
            assert_eq!(f.unpermute(n), None);
        }
        let f = Feistel::keyed(u64::MAX, 7).expect("f");
        for p in [0u64, 1, 1 << 40, u64::MAX - 1] {
            assert_eq!(f.unpermute(f.permute(p).expect("v")), Some(p));
        }
    }

    #[test]
    fn geometry_follows_the_sizes() {
        // 1000 records of 100 bytes, blocks of 1000 bytes: groups of 10.
        let w = Windowed::new(1000, 100_000, 0, 1000, 3500, 7, 0).expect("w");
        assert_eq!((w.group(), w.window(), w.windows()), (10, 30, 34));
        assert_eq!(w.last, 10);
        // Records larger than a block: one per group; a window below a block: one group.
        let w = Windowed::new(10, 10_000, 0, 100, 50, 3, 0).expect("w");
        assert_eq!((w.group(), w.window(), w.windows()), (1, 1, 10));
        // Empty records, or a window larger than the store: one window.
        let w = Windowed::new(10, 0, 0, 100, 1 << 40, 3, 0).expect("w");
        assert_eq!((w.group(), w.window(), w.windows()), (10, 10, 1));
        let w = Windowed::new(u64::MAX, u64::MAX, 0, u64::MAX, u64::MAX, 3, 0).expect("w");
        assert_eq!(
            (w.group(), w.window(), w.windows()),
            (u64::MAX, u64::MAX, 1)
        );
    }

    #[test]
    fn the_index_counts_with_the_data() {
        // 1000 records of 8 bytes with 24-byte entries, blocks of 1024 bytes:
        // groups of 1024 * 1000 / 32000 = 32 records, not 128.
        let w = Windowed::new(1000, 8000, 24_000, 1024, 4096, 7, 0).expect("w");
        assert_eq!((w.group(), w.window(), w.windows()), (32, 128, 8));
        let data_only = Windowed::new(1000, 8000, 0, 1024, 4096, 7, 0).expect("w");
        assert_eq!(data_only.group(), 128);
        // An index alone sizes the groups; both at their largest do not overflow.
        let w = Windowed::new(10, 0, 100, 20, 40, 3, 0).expect("w");
        assert_eq!((w.group(), w.window()), (2, 4));
        let w = Windowed::new(u64::MAX, u64::MAX, u64::MAX, u64::MAX, u64::MAX, 3, 0).expect("w");
        assert_eq!((w.group(), w.windows()), (u64::MAX / 2, 3));
    }

    #[test]
    fn every_pass_holds_every_record_once() {
        for (n, data, block, window_bytes, b) in [
            (1u64, 10u64, 4u64, 4u64, 1usize),
            (1, 10, 4, 4, 3),
            (10, 100, 10, 30, 3),
            (97, 970, 20, 50, 8),
            (1000, 100_000, 1000, 3500, 7),
            (1000, 100_000, 1000, 3500, 1500),
            (4099, 40_990, 100, 1000, 256),
            (5, 50, 1, 1, 2),
        ] {
            let s = Windowed::new(n, data, 0, block, window_bytes, b, 3).expect("s");
            let total = 3 * n as usize;
            let steps = total.div_ceil(b) as u64;
            let mut all = Vec::new();
            for step in 0..steps {
                all.extend(batch(&s, step));
            }
            for pass in all[..total].chunks(n as usize) {
                let mut v = pass.to_vec();
                v.sort_unstable();
                assert_eq!(v, (0..n).collect::<Vec<_>>(), "n={n} b={b}");
            }
            if n > 2 {
                assert_ne!(all[..n as usize], all[n as usize..2 * n as usize]);
            }
        }
    }

    #[test]
    fn windows_are_visited_one_at_a_time() {
        let s = Windowed::new(1000, 100_000, 0, 1000, 3500, 30, 9).expect("s");
        let pass: Vec<u64> = (0..34).flat_map(|step| batch(&s, step)).collect();
        let mut changes = 0;
        for pair in pass[..1000].windows(2) {
            changes += (pair[0] / 30 != pair[1] / 30) as usize;
        }
        assert_eq!(changes, 33);
    }

    #[test]
    fn huge_steps_and_lengths_stay_in_range() {
        let s = Windowed::new(u64::MAX, u64::MAX / 2, 0, 1 << 20, 1 << 28, 1000, 1).expect("s");
        for step in [0u64, 1, u64::MAX / 1000, u64::MAX] {
            assert!(batch(&s, step).iter().all(|&v| v < u64::MAX));
        }
        let s = Windowed::new(7, 70, 0, 10, 20, 5, 1).expect("s");
        let mut tail = batch(&s, u64::MAX - 1);
        tail.extend(batch(&s, u64::MAX));
        assert!(tail.iter().all(|&v| v < 7));
    }

    #[test]
    fn invalid_arguments_are_errors() {
        assert!(Windowed::new(0, 1, 0, 1, 1, 1, 0).is_err());
        assert!(Windowed::new(1, 1, 0, 1, 1, 0, 0).is_err());
        assert!(Windowed::new(1, 1, 0, 0, 1, 1, 0).is_err());
        assert!(Windowed::new(1, 1, 0, 1, 0, 1, 0).is_err());
        let s = Windowed::new(10, 10, 0, 1, 1, 4, 0).expect("s");
        assert!(s.fill(0, &mut [0u64; 3]).is_err());
    }
}
