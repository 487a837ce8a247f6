//! Stateless weighted mixtures of position ranges.
//!
//! Like the [`Sampler`](crate::Sampler), every batch is a pure function of the
//! configuration and the step, so resuming at any step is O(1) in the step. The
//! algorithm is written down in `docs/loader.md`, section "Mixtures"; in short:
//!
//! * Slot `n = step * batch + i` of the endless slot sequence has the point
//!   `x(n) = ((n mod W) * g) mod W`, where `W` is the total of the integer weights
//!   and `g` the stride (coprime to `W`, near `W / φ`). Range `r` owns the points
//!   `[P_r, P_r + w_r)` (`P_r` the sum of the weights before it), so every `W`
//!   consecutive slots hold exactly `w_r` slots of range `r`.
//! * The number of earlier slots of range `r`, which is the visit index of the
//!   slot within its range, has a closed form (a floor sum, O(log W)).
//! * Visit `k` of range `r` is the position the range's traversal (SEQUENTIAL,
//!   IID or CYCLIC, the Sampler's kernels with a per-range key) puts at `k`.
//!
//! No floating-point arithmetic: float weights are converted exactly to integers
//! once, by [`integer_weights`], with integer operations on their bits.

use crate::{
    fill_iid_from, fill_permuted, fill_sequential_from, mix64, Error, Feistel, Mode, Result, GAMMA,
};

/// Domain separation of the per-range keys (`seed ^ tag`).
pub const TAG_MIXTURE: u64 = 0x6C78_2E6D_6978_0003;
/// The most ranges one mixture holds.
pub const MAX_RANGES: usize = 1 << 16;
/// The largest total of the integer weights, after division by their greatest
/// common divisor.
pub const MAX_TOTAL_WEIGHT: u64 = 1 << 63;
/// Float weights are scaled so that the largest lies in `[2^46, 2^47)`, then
/// rounded to integers; with at most [`MAX_RANGES`] ranges the total stays
/// within [`MAX_TOTAL_WEIGHT`].
pub const FLOAT_WEIGHT_BITS: u32 = 46;

/// One weight as the caller gave it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Weight {
    /// An integer.
    Int(i128),
    /// An integer beyond the `i128` range, as the nearest `f64` (infinite beyond
    /// the `f64` range): too large, or negative, as an integer weight, and that
    /// float on the float path.
    LargeInt(f64),
    /// A floating-point number.
    Float(f64),
}

/// `x = mantissa * 2^exponent` exactly, for a finite `x >= 0`.
fn decompose(x: f64) -> (u64, i32) {
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7FF) as i32;
    let fraction = bits & ((1 << 52) - 1);
    if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), biased - 1075)
    }
}

/// `mantissa * 2^shift`, rounded to the nearest integer (ties to even); the
/// caller guarantees that the result is below `2^63`.
fn scale_round(mantissa: u64, shift: i32) -> u64 {
    if shift >= 0 {
        return mantissa << shift;
    }
    let d = shift.unsigned_abs();
    if d >= 64 {
        // mantissa < 2^53 < 2^(d-1): below one half.
        return 0;
    }
    let q = mantissa >> d;
    let rem = mantissa & ((1u64 << d) - 1);
    let half = 1u64 << (d - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q + 1
    } else {
        q
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The exact integer weights of `weights`, divided by their greatest common
/// divisor.
///
/// All integers: used as given (each `>= 0`, not all zero, total at most
/// [`MAX_TOTAL_WEIGHT`] after the division). Any float among them: every weight is
/// taken as an `f64` (integers rounded to nearest), must be finite and `>= 0`,
/// and is multiplied by the power of two that puts the largest in
/// `[2^FLOAT_WEIGHT_BITS, 2^(FLOAT_WEIGHT_BITS + 1))`, then rounded to the
/// nearest integer, ties to even; a positive weight that rounds to 0 is an error
/// rather than a range silently never drawn.
pub fn integer_weights(weights: &[Weight]) -> Result<Vec<u64>> {
    if weights.is_empty() {
        return Err(Error("weights must not be empty".into()));
    }
    if weights.len() > MAX_RANGES {
        return Err(Error(format!(
            "at most {MAX_RANGES} weights are supported, got {}",
            weights.len()
        )));
    }
    let any_float = weights.iter().any(|w| matches!(w, Weight::Float(_)));
    let mut out = Vec::with_capacity(weights.len());
    if !any_float {
        let mut total: u128 = 0;
        for (i, w) in weights.iter().enumerate() {
            let v = match *w {
                Weight::Int(v) => v,
                Weight::LargeInt(v) if v < 0.0 => {
                    return Err(Error(format!("weights[{i}] is negative ({v:e})")))
                }
                Weight::LargeInt(_) => return Err(too_large()),
                Weight::Float(_) => {
                    return Err(Error("internal: a float weight on the integer path".into()))
                }
            };
            if v < 0 {
                return Err(Error(format!("weights[{i}] is negative ({v})")));
            }
            let v = u64::try_from(v).map_err(|_| too_large())?;
            total = total.checked_add(v as u128).ok_or_else(too_large)?;
            out.push(v);
        }
        if total == 0 {
            return Err(Error("weights must not all be zero".into()));
        }
    } else {
        let values: Vec<f64> = weights
            .iter()
            .map(|w| match *w {
                Weight::Int(v) => v as f64,
                Weight::LargeInt(v) | Weight::Float(v) => v,
            })
            .collect();
        for (i, &v) in values.iter().enumerate() {
            if v.is_infinite() && matches!(weights[i], Weight::LargeInt(_)) {
                return Err(Error(format!(
                    "weights[{i}] is an integer beyond the range of a float"
                )));
            }
            if v.is_nan() {
                return Err(Error(format!("weights[{i}] is NaN")));
            }
            if v.is_infinite() {
                return Err(Error(format!("weights[{i}] is infinite ({})", shown(v))));
            }
            if v < 0.0 {
                return Err(Error(format!("weights[{i}] is negative ({})", shown(v))));
            }
        }
        let parts: Vec<(u64, i32)> = values.iter().map(|&v| decompose(v)).collect();
        // floor(log2) of the largest weight, from its bits.
        let top = parts
            .iter()
            .filter(|(m, _)| *m != 0)
            .map(|&(m, e)| e + 63 - m.leading_zeros() as i32)
            .max()
            .ok_or_else(|| Error("weights must not all be zero".into()))?;
        let shift = FLOAT_WEIGHT_BITS as i32 - top;
        for (i, &(m, e)) in parts.iter().enumerate() {
            let v = scale_round(m, e + shift);
            if v == 0 && m != 0 {
                return Err(Error(format!(
                    "weights[{i}] ({}) is positive but below 2^-{} of the largest weight, \
                     so it would never be drawn; pass integer weights for such ratios",
                    shown(values[i]),
                    FLOAT_WEIGHT_BITS + 1
                )));
            }
            out.push(v);
        }
    }
    let divisor = out.iter().fold(0, |g, &w| gcd(g, w));
    for w in &mut out {
        *w /= divisor;
    }
    let total: u128 = out.iter().map(|&w| w as u128).sum();
    if total > MAX_TOTAL_WEIGHT as u128 {
        return Err(too_large());
    }
    Ok(out)
}

/// A weight as a message shows it: in the shortest form that reads back as the
/// same float, with an exponent where plain digits would run long (`1e-300`,
/// not three hundred zeros).
fn shown(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

fn too_large() -> Error {
    Error(format!(
        "the integer weights total more than 2^63 ({MAX_TOTAL_WEIGHT}) even after division \
         by their greatest common divisor; scale them down"
    ))
}

/// Candidates on each side of `W / φ` that [`stride`] considers.
pub const STRIDE_SPAN: u64 = 256;

/// The largest partial quotient of the continued fraction of `a / b` for
/// `0 < a < b` (the leading 0 left out).
fn largest_partial_quotient(mut a: u64, mut b: u64) -> u64 {
    let mut largest = 0;
    while a != 0 {
        largest = largest.max(b / a);
        (a, b) = (b % a, a);
    }
    largest
}

/// The stride `g` of the point sequence for a total weight `w >= 2`: among the
/// integers `c` in `[g0 - STRIDE_SPAN, g0 + STRIDE_SPAN]` ∩ `[1, w - 1]` that are
/// coprime to `w`, where `g0 = floor(w * GAMMA / 2^64)` (about `w / φ`), the one
/// whose continued fraction `c / w` has the smallest largest partial quotient;
/// ties go to the smaller `|c - g0|`, then the smaller `c`. 0 when `w <= 1`.
///
/// Small partial quotients are what keeps the counts of every range close to
/// their share at every point of the sequence, not only at whole periods.
pub fn stride(w: u64) -> u64 {
    if w <= 1 {
        return 0;
    }
    let g0 = ((w as u128 * GAMMA as u128) >> 64) as u64;
    let low = g0.saturating_sub(STRIDE_SPAN).max(1);
    let high = g0.saturating_add(STRIDE_SPAN).min(w - 1);
    // 1 is coprime to every w, so the fallback only serves windows without a
    // coprime candidate (none exist for w >= 2, but nothing here relies on it).
    let mut best = (u64::MAX, u64::MAX, 1);
    for c in low..=high {
        if gcd(c, w) != 1 {
            continue;
        }
        let key = (largest_partial_quotient(c, w), c.abs_diff(g0), c);
        best = best.min(key);
    }
    best.2
}

/// `sum_{i=0}^{n-1} floor((a*i + b) / m)` for `m >= 1`, by the Euclid-like
/// reduction (O(log m) iterations); `None` on overflow of 128 bits.
fn floor_sum(mut n: u128, mut m: u128, mut a: u128, mut b: u128) -> Option<u128> {
    let mut sum: u128 = 0;
    loop {
        if n == 0 {
            return Some(sum);
        }
        if a >= m {
            let pairs = if n % 2 == 0 {
                (n / 2).checked_mul(n - 1)?
            } else {
                n.checked_mul((n - 1) / 2)?
            };
            sum = sum.checked_add(pairs.checked_mul(a / m)?)?;
            a %= m;
        }
        if b >= m {
            sum = sum.checked_add(n.checked_mul(b / m)?)?;
            b %= m;
        }
        let top = a.checked_mul(n)?.checked_add(b)?;
        if top < m {
            return Some(sum);
        }
        n = top / m;
        b = top % m;
        std::mem::swap(&mut m, &mut a);
    }
}

fn overflow() -> Error {
    Error("internal: 128-bit overflow in a mixture count".into())
}

/// Slots handled together by [`Mixture::fill`].
const SLOT_CHUNK: usize = 4096;

/// Reusable memory for [`Mixture::fill`], sized for one mixture.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    /// The range of each slot of the chunk.
    slot_range: Vec<u32>,
    /// The chunk's positions grouped by range, before they are put in slot order.
    grouped: Vec<u64>,
    /// Per range: slots in this chunk, then the next read offset into `grouped`.
    count: Vec<usize>,
    /// The ranges present in the chunk, in order of first appearance.
    touched: Vec<u32>,
    /// Per range: its visits before the first slot of step `at`.
    visits: Vec<u128>,
    /// The step whose first slot `visits` describes; `None` when unknown.
    /// Consecutive draws carry the counts forward in O(B) instead of recomputing
    /// them with floor sums; the result is the same either way.
    at: Option<u64>,
}

/// A validated mixture; [`Mixture::fill`] writes the batch of a step.
#[derive(Clone, Debug)]
pub struct Mixture {
    starts: Vec<u64>,
    lengths: Vec<u64>,
    modes: Vec<Mode>,
    keys: Vec<u64>,
    weights: Vec<u64>,
    /// `bounds[r] = P_r`, the weights before range `r`; `bounds[R] = W`.
    bounds: Vec<u64>,
    stride: u64,
    batch: usize,
    seed: u64,
}

impl Mixture {
    /// Checks the arguments once so that [`Mixture::fill`] only computes.
    ///
    /// `ranges` are half-open `[start, stop)`, non-empty and pairwise disjoint, in
    /// any order; `weights` and `modes` pair with them by index.
    pub fn new(
        ranges: &[(u64, u64)],
        weights: &[Weight],
        batch: usize,
        modes: &[Mode],
        seed: u64,
    ) -> Result<Mixture> {
        if ranges.is_empty() {
            return Err(Error("ranges must not be empty".into()));
        }
        if ranges.len() > MAX_RANGES {
            return Err(Error(format!(
                "at most {MAX_RANGES} ranges are supported, got {}",
                ranges.len()
            )));
        }
        if weights.len() != ranges.len() {
            return Err(Error(format!(
                "{} weights for {} ranges: give one weight per range",
                weights.len(),
                ranges.len()
            )));
        }
        if modes.len() != ranges.len() {
            return Err(Error(format!(
                "{} modes for {} ranges: give one mode per range",
                modes.len(),
                ranges.len()
            )));
        }
        if batch == 0 {
            return Err(Error("batch_size must be at least 1".into()));
        }
        u32::try_from(batch)
            .map_err(|_| Error(format!("batch_size must be below 2^32, got {batch}")))?;
        for (i, &(start, stop)) in ranges.iter().enumerate() {
            if start >= stop {
                return Err(Error(format!(
                    "ranges[{i}] = ({start}, {stop}) is empty: start must be below stop"
                )));
            }
        }
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges[i]);
        for pair in order.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if ranges[b].0 < ranges[a].1 {
                let (lo, hi) = (a.min(b), a.max(b));
                return Err(Error(format!(
                    "ranges[{lo}] = {:?} and ranges[{hi}] = {:?} overlap: ranges must be disjoint",
                    ranges[lo], ranges[hi]
                )));
            }
        }
        let weights = integer_weights(weights)?;
        let mut bounds = Vec::with_capacity(weights.len() + 1);
        let mut total: u64 = 0;
        bounds.push(0);
        for &w in &weights {
            total = total.checked_add(w).ok_or_else(too_large)?;
            bounds.push(total);
        }
        let base = mix64(seed ^ TAG_MIXTURE);
        let keys = (0..ranges.len() as u64)
            .map(|r| mix64(base.wrapping_add((r + 1).wrapping_mul(GAMMA))))
            .collect();
        Ok(Mixture {
            starts: ranges.iter().map(|r| r.0).collect(),
            lengths: ranges.iter().map(|r| r.1 - r.0).collect(),
            modes: modes.to_vec(),
            keys,
            weights,
            bounds,
            stride: stride(total),
            batch,
            seed,
        })
    }

    /// The ranges as `(start, stop)`, in the order given.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.starts
            .iter()
            .zip(&self.lengths)
            .map(|(&s, &l)| (s, s + l))
            .collect()
    }
    /// The integer weights, divided by their greatest common divisor.
    pub fn weights(&self) -> &[u64] {
        &self.weights
    }
    /// Each range's traversal.
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }
    /// Positions per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// The key every range's key derives from.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// `W`, the total of the integer weights.
    pub fn total_weight(&self) -> u64 {
        self.bounds[self.weights.len()]
    }
    /// `g`, the stride of the point sequence.
    pub fn stride(&self) -> u64 {
        self.stride
    }
    /// The key of range `r`'s traversal (the seed its Sampler kernel receives).
    pub fn key(&self, r: usize) -> Option<u64> {
        self.keys.get(r).copied()
    }

    /// Memory for [`Mixture::fill`]; fails only when it cannot be allocated.
    pub fn scratch(&self) -> Result<Scratch> {
        let mut s = Scratch::default();
        let fail = |_| Error("cannot allocate the mixture's scratch memory".into());
        let slots = self.batch.min(SLOT_CHUNK);
        s.slot_range.try_reserve_exact(slots).map_err(fail)?;
        s.grouped.try_reserve_exact(slots).map_err(fail)?;
        s.count
            .try_reserve_exact(self.weights.len())
            .map_err(fail)?;
        s.touched
            .try_reserve_exact(slots.min(self.weights.len()))
            .map_err(fail)?;
        s.visits
            .try_reserve_exact(self.weights.len())
            .map_err(fail)?;
        s.slot_range.resize(slots, 0);
        s.grouped.resize(slots, 0);
        s.count.resize(self.weights.len(), 0);
        s.visits.resize(self.weights.len(), 0);
        Ok(s)
    }

    /// The range owning point `x < W`: the `r` with `P_r <= x < P_(r+1)`, which
    /// has a positive weight.
    #[inline(always)]
    fn range_of(&self, x: u64) -> usize {
        let inner = &self.bounds[1..self.bounds.len() - 1];
        if inner.len() <= 8 {
            // Branch-free for few ranges: slot ranges follow no pattern a branch
            // predictor could learn.
            inner.iter().map(|&b| (b <= x) as usize).sum()
        } else {
            self.bounds.partition_point(|&b| b <= x) - 1
        }
    }

    /// `#{i < m : (i * g) mod W < p}` for `m < W`, `p <= W`, given
    /// `plain = F(m, g, 0, W)`.
    fn below(&self, m: u128, p: u64, plain: u128) -> Result<u128> {
        let w = self.total_weight() as u128;
        if p == 0 {
            return Ok(0);
        }
        if p as u128 == w {
            return Ok(m);
        }
        // (i*g mod W) >= p  <=>  floor((i*g + W - p) / W) - floor(i*g / W) = 1
        let shifted = floor_sum(m, w, self.stride as u128, w - p as u128).ok_or_else(overflow)?;
        let at_or_above = shifted.checked_sub(plain).ok_or_else(overflow)?;
        m.checked_sub(at_or_above).ok_or_else(overflow)
    }

    /// Writes into `visits[r]` how many of slots `0 .. n` belong to range `r`:
    /// the visit index of range `r`'s next slot at or after slot `n`. One floor
    /// sum per range of positive weight, plus one.
    pub fn visits_before(&self, n: u128, visits: &mut [u128]) -> Result<()> {
        if visits.len() != self.weights.len() {
            return Err(Error(format!(
                "{} counts for {} ranges",
                visits.len(),
                self.weights.len()
            )));
        }
        let w = self.total_weight() as u128;
        let (periods, rest) = (n / w, n % w);
        let plain = floor_sum(rest, w, self.stride as u128, 0).ok_or_else(overflow)?;
        let mut before = 0; // below(rest, P_r), from P_0 = 0
        for (r, v) in visits.iter_mut().enumerate() {
            let weight = self.weights[r];
            let through = if weight == 0 {
                before
            } else {
                self.below(rest, self.bounds[r + 1], plain)?
            };
            let inside = through.checked_sub(before).ok_or_else(overflow)?;
            *v = periods
                .checked_mul(weight as u128)
                .and_then(|x| x.checked_add(inside))
                .ok_or_else(overflow)?;
            before = through;
        }
        Ok(())
    }

    /// The range of slot `n`.
    pub fn range_of_slot(&self, n: u128) -> usize {
        let w = self.total_weight() as u128;
        self.range_of(((n % w) * self.stride as u128 % w) as u64)
    }

    /// Writes the positions of visits `k0, k0 + 1, ...` of range `r` into `out`.
    fn fill_visits(&self, r: usize, k0: u128, out: &mut [u64]) -> Result<()> {
        let length = self.lengths[r];
        let key = self.keys[r];
        match self.modes[r] {
            Mode::Sequential => fill_sequential_from(length, (k0 % length as u128) as u64, out),
            // Draw number k mod 2^64 of the range's stream, as in the Sampler.
            Mode::Iid => fill_iid_from(length, key, k0 as u64, out),
            Mode::Cyclic => {
                let mut k = k0;
                let mut rest = &mut out[..];
                while !rest.is_empty() {
                    // Pass c of the range is its permutation number c mod 2^64.
                    let pass = (k / length as u128) as u64;
                    let first = (k % length as u128) as u64;
                    let room = usize::try_from(length - first).unwrap_or(usize::MAX);
                    let (now, later) = rest.split_at_mut(rest.len().min(room));
                    fill_permuted(&Feistel::new(length, key, pass)?, first, now);
                    k += now.len() as u128;
                    rest = later;
                }
            }
        }
        let start = self.starts[r];
        // Every value is below the range's length and start + length = stop fits.
        for v in out.iter_mut() {
            *v += start;
        }
        Ok(())
    }

    /// Writes the batch of `step` into `out`, which must hold exactly `batch`
    /// items; `scratch` must come from this mixture's [`Mixture::scratch`].
    pub fn fill(&self, step: u64, out: &mut [u64], scratch: &mut Scratch) -> Result<()> {
        if out.len() != self.batch {
            return Err(Error(format!(
                "output holds {} items, the batch size is {}",
                out.len(),
                self.batch
            )));
        }
        let Scratch {
            slot_range,
            grouped,
            count,
            touched,
            visits,
            at,
        } = scratch;
        if slot_range.len() != self.batch.min(SLOT_CHUNK)
            || grouped.len() != self.batch.min(SLOT_CHUNK)
            || count.len() != self.weights.len()
            || visits.len() != self.weights.len()
        {
            return Err(Error("scratch memory of another mixture".into()));
        }
        // Clear what an earlier call (possibly one that failed) left behind.
        for &r in touched.iter() {
            count[r as usize] = 0;
        }
        touched.clear();
        // Slices rather than the vectors: the loops below then keep their
        // pointers in registers instead of reloading them after every store.
        let (slot_range, grouped, count, visits) = (
            slot_range.as_mut_slice(),
            grouped.as_mut_slice(),
            count.as_mut_slice(),
            visits.as_mut_slice(),
        );

        let w = self.total_weight();
        let first = step as u128 * self.batch as u128;
        if *at != Some(step) {
            *at = None;
            self.visits_before(first, visits)?;
        }
        // Until this batch is complete, `visits` is partly advanced.
        *at = None;
        let mut x = ((first % w as u128) * self.stride as u128 % w as u128) as u64;
        // Slot by slot in chunks small enough for the per-slot buffers to stay in
        // cache; `visits` carries each range's count from one chunk to the next.
        for out in out.chunks_mut(SLOT_CHUNK) {
            let slot_range = &mut slot_range[..out.len()];
            for s in slot_range.iter_mut() {
                let r = self.range_of(x);
                if count[r] == 0 {
                    touched.push(r as u32);
                }
                count[r] += 1;
                *s = r as u32;
                // x < W <= 2^63 and g < W: no overflow. Branch-free, as above.
                x += self.stride;
                x -= w & 0u64.wrapping_sub((x >= w) as u64);
            }
            let mut offset = 0;
            for &r in touched.iter() {
                let r = r as usize;
                let n = count[r];
                self.fill_visits(r, visits[r], &mut grouped[offset..offset + n])?;
                visits[r] = visits[r].checked_add(n as u128).ok_or_else(overflow)?;
                count[r] = offset;
                offset += n;
            }
            for (o, &r) in out.iter_mut().zip(slot_range.iter()) {
                let next = &mut count[r as usize];
                *o = grouped[*next];
                *next += 1;
            }
            for &r in touched.iter() {
                count[r as usize] = 0;
            }
            touched.clear();
        }
        *at = step.checked_add(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
