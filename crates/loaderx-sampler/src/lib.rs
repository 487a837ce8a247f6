//! Stateless batch functions of the Sampler.
//!
//! Every batch is a pure function of `(mode, length, batch, seed, step)`: nothing
//! is carried from one draw to the next, so a run resumes at any step in O(1) and
//! two processes with the same arguments produce the same indices bit for bit.
//! The exact algorithms (constants included) are written down in `docs/sampler.md`;
//! the pure-Python `tests/support/sampler_reference.py` reproduces them.
//!
//! * [`Mode::Sequential`]: position `(step * batch + i) mod length`.
//! * [`Mode::Iid`]: draw number `n = step * batch + i (mod 2^64)` of a SplitMix64
//!   stream keyed by the seed, reduced to `[0, length)` by the multiply-high method.
//! * [`Mode::Cyclic`]: cycle `c = step / (length / batch)` applies its own keyed
//!   Feistel bijection (cycle walking over the smallest even-bit power-of-two
//!   domain) to positions `j * batch + i` of that cycle.
//!
//! [`Mixture`] draws each batch from several disjoint position ranges in given
//! proportions, traversing each range with one of these kernels. [`Windowed`]
//! shuffles a store a window of its bytes at a time (every record once per pass),
//! on the CYCLIC network with its own keys. [`Packing`] plans token-budget packs
//! of whole records once, from their lengths, and draws steps of packs from the
//! plan in O(1) per step.
//!
//! Nothing here panics on any argument: invalid arguments are an [`Error`].

#![deny(missing_docs)]

pub mod mixture;
pub mod packing;
pub mod windowed;
pub use mixture::{Mixture, Weight};
pub use packing::{Long, Packing};
pub use windowed::Windowed;

/// An argument outside the sampler's contract; the message says which and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

/// What every fallible function here returns.
pub type Result<T> = std::result::Result<T, Error>;

/// The SplitMix64 increment (the odd integer closest to 2^64 / golden ratio).
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
/// Domain separation of the IID stream from the CYCLIC keys (`seed ^ tag`).
pub const TAG_IID: u64 = 0x6C78_2E69_6964_0001;
/// Domain separation of the CYCLIC round keys.
pub const TAG_CYCLIC: u64 = 0x6C78_2E63_7963_0002;
/// Rounds of the balanced Feistel network of CYCLIC.
pub const FEISTEL_ROUNDS: usize = 6;

/// The last step a sampler draws: steps are numbered `0..=LAST_STEP`.
pub const LAST_STEP: u64 = u64::MAX;

/// How a batch is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Records in order, wrapping at the end.
    Sequential,
    /// Uniform with replacement.
    Iid,
    /// A fresh permutation every cycle, full batches only.
    Cyclic,
}

impl Mode {
    /// Every mode, in code order.
    pub const ALL: [Mode; 3] = [Mode::Sequential, Mode::Iid, Mode::Cyclic];

    /// The stable small-integer code used across the Python boundary.
    pub fn from_code(code: u8) -> Option<Mode> {
        match code {
            0 => Some(Mode::Sequential),
            1 => Some(Mode::Iid),
            2 => Some(Mode::Cyclic),
            _ => None,
        }
    }

    /// The inverse of [`Mode::from_code`].
    pub fn code(self) -> u8 {
        match self {
            Mode::Sequential => 0,
            Mode::Iid => 1,
            Mode::Cyclic => 2,
        }
    }

    /// The name Python's `Sampler.Mode` uses.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "SEQUENTIAL",
            Mode::Iid => "IID",
            Mode::Cyclic => "CYCLIC",
        }
    }
}

/// The SplitMix64 finalizer: a bijection of `u64` with full avalanche.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 32-bit integer hash (xor-shift / multiply, two rounds): the Feistel round
/// function's mixer.
#[inline(always)]
pub fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7FEB_352D);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846C_A68B);
    x ^ (x >> 16)
}

/// `floor(u * n / 2^64)`: maps a uniform `u64` onto `[0, n)` with a bias of at
/// most `n / 2^64` relative to uniform (Lemire's multiply-high reduction).
#[inline(always)]
pub fn reduce(u: u64, n: u64) -> u64 {
    ((u as u128 * n as u128) >> 64) as u64
}

/// Key number `index` of the stream `tag` of `seed`:
/// `mix64(mix64(seed ^ tag) + (index + 1) * GAMMA)` (CYCLIC's cycle keys).
#[inline]
pub fn stream_key(seed: u64, tag: u64, index: u64) -> u64 {
    mix64(mix64(seed ^ tag).wrapping_add(index.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// The keyed bijection of `[0, length)` used by one CYCLIC cycle.
#[derive(Clone, Debug)]
pub struct Feistel {
    length: u64,
    half_bits: u32,
    mask: u32,
    keys: [u32; FEISTEL_ROUNDS],
}

/// Half the bit width of the Feistel domain: the smallest `h >= 1` with
/// `2^(2h) >= length`.
pub fn half_bits(length: u64) -> u32 {
    let bits = 64 - length.saturating_sub(1).leading_zeros();
    bits.div_ceil(2).max(1)
}

impl Feistel {
    /// The permutation of cycle `cycle` for `seed`. `length` must be at least 1.
    pub fn new(length: u64, seed: u64, cycle: u64) -> Result<Feistel> {
        Feistel::keyed(length, stream_key(seed, TAG_CYCLIC, cycle))
    }

    /// The permutation whose round keys derive from `cycle_key`: round
    /// `r` is keyed by `low32(mix64(key + (r + 1) * GAMMA))`. `length` must be at
    /// least 1.
    pub fn keyed(length: u64, cycle_key: u64) -> Result<Feistel> {
        if length == 0 {
            return Err(Error("length must be at least 1".into()));
        }
        let h = half_bits(length);
        let mut keys = [0u32; FEISTEL_ROUNDS];
        for (r, k) in keys.iter_mut().enumerate() {
            *k = mix64(cycle_key.wrapping_add((r as u64 + 1).wrapping_mul(GAMMA))) as u32;
        }
        Ok(Feistel {
            length,
            half_bits: h,
            mask: u32::MAX >> (32 - h),
            keys,
        })
    }

    /// Every round of the network on one pair of halves; the only place the
    /// round function is written.
    #[inline(always)]
    fn network(&self, mut left: u32, mut right: u32) -> (u32, u32) {
        for &k in &self.keys {
            let next = left ^ (mix32(right ^ k) & self.mask);
            left = right;
            right = next;
        }
        (left, right)
    }

    /// One pass of the network over the `2^(2h)` domain (no cycle walking).
    #[inline(always)]
    fn round_trip(&self, x: u64) -> u64 {
        let h = self.half_bits;
        let (left, right) = self.network((x >> h) as u32, (x as u32) & self.mask);
        ((left as u64) << h) | right as u64
    }

    /// The image of `position` in `[0, length)`; `None` when out of range.
    pub fn permute(&self, position: u64) -> Option<u64> {
        if position >= self.length {
            return None;
        }
        let mut x = self.round_trip(position);
        // Terminates: the network is a bijection of the domain, so the walk is on
        // the cycle through `position`, which is in range.
        while x >= self.length {
            x = self.round_trip(x);
        }
        Some(x)
    }

    /// Applies the network once to every pair `(left[k], right[k])`, in place
    /// (the halves of the domain value `left << h | right`).
    #[inline(always)]
    fn rounds_all(&self, left: &mut [u32], right: &mut [u32]) {
        for (l, r) in left.iter_mut().zip(right.iter_mut()) {
            (*l, *r) = self.network(*l, *r);
        }
    }
}

/// [`Feistel::rounds_all`], compiled with AVX2 (eight 32-bit lanes) when this CPU
/// has it. The arithmetic, hence the result, is identical on every path.
fn rounds_all(f: &Feistel, left: &mut [u32], right: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature this function is compiled for was detected.
            return unsafe { rounds_all_avx2(f, left, right) };
        }
    }
    f.rounds_all(left, right)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rounds_all_avx2(f: &Feistel, left: &mut [u32], right: &mut [u32]) {
    f.rounds_all(left, right)
}

/// Positions handled together by the CYCLIC kernel (stack buffers).
const CHUNK: usize = 256;

/// A validated sampler definition; [`Sampler::fill`] writes the batch of a step.
#[derive(Clone, Debug)]
pub struct Sampler {
    mode: Mode,
    length: u64,
    batch: usize,
    seed: u64,
    /// Full batches per CYCLIC cycle (`length / batch`); 0 for other modes.
    per_cycle: u64,
}

impl Sampler {
    /// Checks the arguments once so that [`Sampler::fill`] only computes.
    pub fn new(mode: Mode, length: u64, batch: usize, seed: u64) -> Result<Sampler> {
        if length == 0 {
            return Err(Error("length must be at least 1".into()));
        }
        if batch == 0 {
            return Err(Error("batch_size must be at least 1".into()));
        }
        let b64 =
            u64::try_from(batch).map_err(|_| Error("batch_size does not fit in 64 bits".into()))?;
        let per_cycle = match mode {
            Mode::Cyclic => {
                if b64 > length {
                    return Err(Error(format!(
                        "batch_size ({batch}) must not exceed length ({length}) in CYCLIC mode: \
                         a cycle would contain no full batch"
                    )));
                }
                length / b64
            }
            _ => 0,
        };
        Ok(Sampler {
            mode,
            length,
            batch,
            seed,
            per_cycle,
        })
    }

    /// How batches are drawn.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// Positions are drawn from `[0, length)`.
    pub fn length(&self) -> u64 {
        self.length
    }
    /// Positions per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// The key of the IID stream and of every CYCLIC permutation.
    pub fn seed(&self) -> u64 {
        self.seed
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
        match self.mode {
            Mode::Sequential => fill_sequential(self.length, step, out),
            Mode::Iid => fill_iid(self.length, self.seed, step, out),
            Mode::Cyclic => self.fill_cyclic(step, out)?,
        }
        Ok(())
    }

    fn fill_cyclic(&self, step: u64, out: &mut [u64]) -> Result<()> {
        let per_cycle = self.per_cycle.max(1);
        let cycle = step / per_cycle;
        let within = step % per_cycle;
        // within < per_cycle = length / batch, so first + batch <= length: no overflow.
        let first = within * self.batch as u64;
        let feistel = Feistel::new(self.length, self.seed, cycle)?;
        fill_permuted(&feistel, first, out);
        Ok(())
    }
}

/// Writes `out[i] = π(first + i)`; every `first + i` must be below the length.
fn fill_permuted(feistel: &Feistel, first: u64, out: &mut [u64]) {
    let length = feistel.length;
    let h = feistel.half_bits;
    let mask = feistel.mask;
    // The walk state of up to CHUNK positions, as the two halves of each value.
    let mut left = [0u32; CHUNK];
    let mut right = [0u32; CHUNK];
    let mut slots = [0u32; CHUNK];
    let mut start = first;
    for chunk in out.chunks_mut(CHUNK) {
        let n = chunk.len();
        let init = left[..n]
            .iter_mut()
            .zip(&mut right[..n])
            .zip(&mut slots[..n]);
        for (i, ((l, r), s)) in init.enumerate() {
            let p = start + i as u64;
            *l = (p >> h) as u32;
            *r = p as u32 & mask;
            *s = i as u32;
        }
        start += n as u64;
        // Each pass applies the network to every live value at once (vectorized),
        // then keeps only the values still outside [0, length), branch-free.
        let mut live = n;
        while live > 0 {
            rounds_all(feistel, &mut left[..live], &mut right[..live]);
            let mut kept = 0;
            for q in 0..live {
                let (l, r, s) = (left[q], right[q], slots[q]);
                let v = ((l as u64) << h) | r as u64;
                if let Some(o) = chunk.get_mut(s as usize) {
                    *o = v;
                }
                left[kept] = l;
                right[kept] = r;
                slots[kept] = s;
                kept += (v >= length) as usize;
            }
            live = kept;
        }
    }
}

fn fill_sequential(length: u64, step: u64, out: &mut [u64]) {
    let start = ((step as u128 * out.len() as u128) % length as u128) as u64;
    fill_sequential_from(length, start, out);
}

/// Writes `out[i] = (start + i) mod length`; `start` must be below `length`.
fn fill_sequential_from(length: u64, start: u64, out: &mut [u64]) {
    if (length - start) as u128 >= out.len() as u128 {
        for (i, o) in out.iter_mut().enumerate() {
            *o = start + i as u64;
        }
        return;
    }
    let mut p = start;
    for o in out.iter_mut() {
        *o = p;
        p += 1;
        if p == length {
            p = 0;
        }
    }
}

fn fill_iid(length: u64, seed: u64, step: u64, out: &mut [u64]) {
    fill_iid_from(length, seed, step.wrapping_mul(out.len() as u64), out);
}

/// Writes draws `n0 + i (mod 2^64)` of the IID stream of `seed` into `out`.
fn fill_iid_from(length: u64, seed: u64, n0: u64, out: &mut [u64]) {
    // Draw n of the stream: state0 + (n + 1) * GAMMA, mod 2^64.
    let first = mix64(seed ^ TAG_IID).wrapping_add(n0.wrapping_add(1).wrapping_mul(GAMMA));
    // Written with `i * GAMMA` rather than a running `state += GAMMA`: with the
    // running sum LLVM vectorizes the 64-bit multiplies for SSE2 (emulated with
    // 32-bit ones), which halves the throughput; this form stays scalar at about
    // three multiplies per index.
    for (i, o) in out.iter_mut().enumerate() {
        let state = first.wrapping_add((i as u64).wrapping_mul(GAMMA));
        *o = reduce(mix64(state), length);
    }
}

/// Writes the batch of `step` into `out` (whose length is the batch size).
pub fn fill(
    mode: Mode,
    length: u64,
    batch: usize,
    seed: u64,
    step: u64,
    out: &mut [u64],
) -> Result<()> {
    Sampler::new(mode, length, batch, seed)?.fill(step, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(s: &Sampler, step: u64) -> Vec<u64> {
        let mut out = vec![0u64; s.batch()];
        s.fill(step, &mut out).expect("fill");
        out
    }

    #[test]
    fn mix64_matches_splitmix64_reference_stream() {
        // SplitMix64 seeded with 1234567: the published first outputs.
        let mut state: u64 = 1234567;
        let expect = [
            6457827717110365317u64,
            3203168211198807973,
            9817491932198370423,
            4593380528125082431,
            16408922859458223821,
        ];
        for e in expect {
            state = state.wrapping_add(GAMMA);
            assert_eq!(mix64(state), e);
        }
    }

    #[test]
    fn half_bits_is_smallest_even_domain() {
        assert_eq!(half_bits(1), 1);
        assert_eq!(half_bits(4), 1);
        assert_eq!(half_bits(5), 2);
        assert_eq!(half_bits(16), 2);
        assert_eq!(half_bits(17), 3);
        assert_eq!(half_bits(1 << 20), 10);
        assert_eq!(half_bits((1 << 20) + 1), 11);
        assert_eq!(half_bits(u64::MAX), 32);
        for n in 1..5000u64 {
            let h = half_bits(n);
            assert!(1u128 << (2 * h) >= n as u128);
            assert!(h == 1 || 1u128 << (2 * h - 2) < n as u128);
        }
    }

    #[test]
    fn feistel_is_a_permutation() {
        for n in [
            1u64, 2, 3, 4, 5, 7, 16, 17, 100, 255, 256, 257, 1000, 4097, 65_537,
        ] {
            for cycle in 0..3 {
                let f = Feistel::new(n, 99, cycle).expect("feistel");
                let mut seen = vec![false; n as usize];
                for p in 0..n {
                    let v = f.permute(p).expect("in range");
                    assert!(v < n);
                    assert!(!seen[v as usize], "n={n} duplicate {v}");
                    seen[v as usize] = true;
                }
                assert_eq!(f.permute(n), None);
            }
        }
    }

    #[test]
    fn cyclic_cycle_is_permutation_minus_remainder() {
        for (n, b) in [
            (1u64, 1usize),
            (10, 3),
            (97, 8),
            (1024, 32),
            (1000, 7),
            (4099, 256),
            (12_345, 1000),
        ] {
            let s = Sampler::new(Mode::Cyclic, n, b, 5).expect("sampler");
            let per = n / b as u64;
            for cycle in 0..3u64 {
                let mut seen = vec![false; n as usize];
                for j in 0..per {
                    for v in batch(&s, cycle * per + j) {
                        assert!(v < n);
                        assert!(!seen[v as usize]);
                        seen[v as usize] = true;
                    }
                }
                // The omitted positions are exactly the cycle's last n % b images.
                let f = Feistel::new(n, 5, cycle).expect("feistel");
                let omitted: Vec<u64> = (per * b as u64..n)
                    .map(|p| f.permute(p).expect("p"))
                    .collect();
                let missing: Vec<u64> = (0..n).filter(|&v| !seen[v as usize]).collect();
                let mut o = omitted.clone();
                o.sort_unstable();
                assert_eq!(o, missing);
            }
        }
    }

    #[test]
    fn cyclic_kernel_matches_scalar_permute() {
        for (n, b) in [
            (1_000_003u64, 4096usize),
            ((1 << 20) + 1, 700),
            (u64::MAX, 300),
            (1 << 63, 513),
        ] {
            let s = Sampler::new(Mode::Cyclic, n, b, 77).expect("sampler");
            let per = n / b as u64;
            for step in [0u64, 1, per - 1, per, 5 * per + 3] {
                let f = Feistel::new(n, 77, step / per).expect("f");
                let first = (step % per) * b as u64;
                let got = batch(&s, step);
                for (i, v) in got.iter().enumerate() {
                    assert_eq!(Some(*v), f.permute(first + i as u64));
                }
            }
        }
    }

    #[test]
    fn huge_lengths_stay_in_range_and_distinct() {
        for n in [(1u64 << 40) + 3, (1 << 63) - 25, 1 << 63, u64::MAX] {
            let s = Sampler::new(Mode::Cyclic, n, 1024, 1).expect("sampler");
            let mut all = Vec::new();
            for step in 0..64 {
                all.extend(batch(&s, step));
            }
            assert!(all.iter().all(|&v| v < n));
            let len = all.len();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), len);
            for mode in [Mode::Iid, Mode::Sequential] {
                let s = Sampler::new(mode, n, 1024, 1).expect("sampler");
                for step in [0, 1, u64::MAX] {
                    assert!(batch(&s, step).iter().all(|&v| v < n));
                }
            }
        }
    }

    #[test]
    fn sequential_wraps_with_128_bit_arithmetic() {
        let s = Sampler::new(Mode::Sequential, 10, 4, 0).expect("s");
        assert_eq!(batch(&s, 0), vec![0, 1, 2, 3]);
        assert_eq!(batch(&s, 2), vec![8, 9, 0, 1]);
        let s = Sampler::new(Mode::Sequential, 3, 7, 0).expect("s");
        assert_eq!(batch(&s, 1), vec![1, 2, 0, 1, 2, 0, 1]);
        let n = u64::MAX;
        let s = Sampler::new(Mode::Sequential, n, 3, 0).expect("s");
        let step = u64::MAX;
        let first = ((step as u128 * 3) % n as u128) as u64;
        let want: Vec<u64> = (0..3u128)
            .map(|i| ((first as u128 + i) % n as u128) as u64)
            .collect();
        assert_eq!(batch(&s, step), want);
    }

    #[test]
    fn iid_is_one_stream_chunked_by_batch() {
        let a = Sampler::new(Mode::Iid, 1000, 6, 9).expect("a");
        let b = Sampler::new(Mode::Iid, 1000, 3, 9).expect("b");
        let mut joined = batch(&b, 4);
        joined.extend(batch(&b, 5));
        assert_eq!(batch(&a, 2), joined);
        assert_ne!(batch(&a, 2), batch(&a, 3));
        let c = Sampler::new(Mode::Iid, 1000, 6, 10).expect("c");
        assert_ne!(batch(&a, 2), batch(&c, 2));
        assert!(batch(&a, u64::MAX).iter().all(|&v| v < 1000));
    }

    #[test]
    fn deterministic_and_cycles_differ() {
        let s = Sampler::new(Mode::Cyclic, 1000, 10, 3).expect("s");
        let t = Sampler::new(Mode::Cyclic, 1000, 10, 3).expect("t");
        for step in [0u64, 7, 100, 12_345] {
            assert_eq!(batch(&s, step), batch(&t, step));
        }
        assert_ne!(batch(&s, 0), batch(&s, 100));
    }

    #[test]
    fn invalid_arguments_are_errors() {
        assert!(matches!(Sampler::new(Mode::Iid, 0, 1, 0), Err(Error(_))));
        assert!(matches!(Sampler::new(Mode::Iid, 1, 0, 0), Err(Error(_))));
        assert!(matches!(Sampler::new(Mode::Cyclic, 3, 4, 0), Err(Error(_))));
        assert!(Sampler::new(Mode::Sequential, 3, 4, 0).is_ok());
        let s = Sampler::new(Mode::Iid, 10, 4, 0).expect("s");
        let mut short = [0u64; 3];
        assert!(matches!(s.fill(0, &mut short), Err(Error(_))));
        assert!(matches!(
            fill(Mode::Cyclic, 0, 1, 0, 0, &mut [0]),
            Err(Error(_))
        ));
        assert!(Feistel::new(0, 0, 0).is_err());
        assert_eq!(Mode::from_code(3), None);
        for m in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
            assert_eq!(Mode::from_code(m.code()), Some(m));
        }
    }
}
