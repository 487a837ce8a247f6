//! Sequence packing: steps of `packs_per_step` packs, each pack a list of whole
//! records whose lengths (a record longer than the budget counted as the budget)
//! sum to at most `tokens_per_pack`.
//!
//! One plan is computed once, at construction: a fixed list of `P` packs that
//! holds every record exactly once. CYCLIC and IID plan over the records in the
//! order of a keyed bijection, cut into windows of [`PACK_WINDOW`] records, each
//! window packed first-fit decreasing; SEQUENTIAL packs the records in position
//! order, next-fit. A step is then a pure function of the step number: pack
//! number `g = step * packs_per_step + k` is plan pack `g mod P` (SEQUENTIAL),
//! the image of `g mod P` under pass `g / P`'s keyed bijection of `[0, P)`
//! (CYCLIC), or draw `g` of a keyed uniform stream over `[0, P)` (IID). The
//! algorithm is written down bit for bit in `docs/sampler.md`, section
//! "PackingSampler".

use std::cmp::Reverse;
use std::thread;

use xxhash_rust::xxh3::Xxh3;

use crate::{fill_permuted, reduce, stream_key, Error, Feistel, Mode, Result};

/// Domain separation of the plan's record order (`seed ^ tag`).
pub const TAG_PACK_PLAN: u64 = 0x6C78_2E70_6B70_0003;
/// Domain separation of each CYCLIC pass's order of the packs.
pub const TAG_PACK_ORDER: u64 = 0x6C78_2E70_6B6F_0004;
/// Domain separation of the IID stream of packs.
pub const TAG_PACK_IID: u64 = 0x6C78_2E70_6B69_0005;
/// Records per window of the CYCLIC and IID plan: packs never mix records of
/// two windows.
pub const PACK_WINDOW: usize = 4096;

/// Windows below which the plan is computed on one thread.
const PARALLEL_FROM_WINDOWS: usize = 64;

/// What a record longer than the budget does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Long {
    /// It counts as `tokens_per_pack`; the consumer keeps its first
    /// `tokens_per_pack` elements.
    Truncate,
    /// Construction fails, naming the first such record.
    Error,
}

impl Long {
    /// The name Python's `long=` argument uses.
    pub fn name(self) -> &'static str {
        match self {
            Long::Truncate => "truncate",
            Long::Error => "error",
        }
    }

    /// The inverse of [`Long::name`].
    pub fn from_name(name: &str) -> Option<Long> {
        match name {
            "truncate" => Some(Long::Truncate),
            "error" => Some(Long::Error),
            _ => None,
        }
    }
}

/// A validated packing sampler and its plan; [`Packing::fill`] writes a step.
#[derive(Clone, Debug)]
pub struct Packing {
    mode: Mode,
    budget: u64,
    packs_per_step: usize,
    seed: u64,
    long: Long,
    lengths: Vec<u64>,
    /// The record position of each item, when the sampler packs a given sequence
    /// of positions (item `j` is record `positions[j]`, of length `lengths[j]`);
    /// empty when item `j` is record `j`.
    positions: Vec<u64>,
    /// xxh3-64 of `positions`, when there are any.
    positions_digest: Option<u64>,
    /// Item numbers, pack after pack (CYCLIC and IID); empty for SEQUENTIAL,
    /// whose pack `p` is the positions `starts[p]..starts[p + 1]`.
    order: Vec<u64>,
    /// `P + 1` offsets: pack `p` is `order[starts[p]..starts[p + 1]]`.
    starts: Vec<u64>,
    /// Records in the largest pack.
    max_pack: usize,
    /// The sum over all records of `min(length, budget)`.
    tokens: u128,
    /// xxh3-64 of the lengths as little-endian u64s.
    digest: u64,
}

fn oom(what: &str, n: usize) -> Error {
    Error(format!("cannot allocate {what} of {n} items"))
}

fn zeroed<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom(what, n))?;
    v.resize(n, T::default());
    Ok(v)
}

impl Packing {
    /// Checks the arguments and computes the plan: `O(records · log PACK_WINDOW)`
    /// for CYCLIC and IID (on several threads for large inputs), `O(records)` for
    /// SEQUENTIAL.
    pub fn new(
        lengths: Vec<u64>,
        budget: u64,
        packs_per_step: usize,
        mode: Mode,
        seed: u64,
        long: Long,
    ) -> Result<Packing> {
        Packing::over(
            lengths,
            Vec::new(),
            budget,
            packs_per_step,
            mode,
            seed,
            long,
        )
    }

    /// As [`Packing::new`], over the items `j` of a given sequence: item `j` is
    /// record `positions[j]`, of length `lengths[j]`, and the steps are those of
    /// `Packing::new(lengths, ..)` with each item `j` written as `positions[j]`.
    /// Empty `positions` means item `j` is record `j`.
    pub fn over(
        lengths: Vec<u64>,
        positions: Vec<u64>,
        budget: u64,
        packs_per_step: usize,
        mode: Mode,
        seed: u64,
        long: Long,
    ) -> Result<Packing> {
        if !positions.is_empty() && positions.len() != lengths.len() {
            return Err(Error(format!(
                "{} positions for {} lengths; give one length per position",
                positions.len(),
                lengths.len()
            )));
        }
        if lengths.is_empty() {
            return Err(Error("lengths must hold at least one record".into()));
        }
        if budget == 0 {
            return Err(Error("tokens_per_pack must be at least 1".into()));
        }
        if packs_per_step == 0 {
            return Err(Error("packs_per_step must be at least 1".into()));
        }
        if long == Long::Error {
            if let Some((i, &l)) = lengths.iter().enumerate().find(|(_, &l)| l > budget) {
                let i = positions.get(i).map_or(i as u64, |&p| p);
                return Err(Error(format!(
                    "long=\"error\": record {i} has length {l}, over tokens_per_pack ({budget})"
                )));
            }
        }
        let tokens = lengths.iter().map(|&l| l.min(budget) as u128).sum();
        let digest = digest(&lengths);
        let positions_digest = (!positions.is_empty()).then(|| self::digest(&positions));
        let (order, starts) = match mode {
            Mode::Sequential => (Vec::new(), next_fit(&lengths, budget)?),
            Mode::Cyclic | Mode::Iid => windowed_first_fit(&lengths, budget, seed)?,
        };
        let max_pack = starts
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0);
        let packing = Packing {
            mode,
            budget,
            packs_per_step,
            seed,
            long,
            lengths,
            positions,
            positions_digest,
            order,
            starts,
            max_pack,
            tokens,
            digest,
        };
        packing.capacity()?;
        Ok(packing)
    }

    /// How packs are chosen.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// The token budget of every pack.
    pub fn budget(&self) -> u64 {
        self.budget
    }
    /// Packs per step.
    pub fn packs_per_step(&self) -> usize {
        self.packs_per_step
    }
    /// The key of the plan and of the pack sequence.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// What a record longer than the budget does.
    pub fn long(&self) -> Long {
        self.long
    }
    /// Each item's length, as given.
    pub fn lengths(&self) -> &[u64] {
        &self.lengths
    }
    /// xxh3-64 of the lengths as little-endian u64s: names them in a resume state.
    pub fn digest(&self) -> u64 {
        self.digest
    }
    /// The record position of each item; empty when item `j` is record `j`.
    pub fn positions(&self) -> &[u64] {
        &self.positions
    }
    /// xxh3-64 of the positions as little-endian u64s, when there are any.
    pub fn positions_digest(&self) -> Option<u64> {
        self.positions_digest
    }
    /// Packs in the plan (`P`).
    pub fn packs(&self) -> u64 {
        (self.starts.len() - 1) as u64
    }
    /// Tokens the plan's packs hold: the sum of `min(length, budget)`.
    pub fn tokens(&self) -> u128 {
        self.tokens
    }
    /// Records in the largest pack.
    pub fn max_pack(&self) -> usize {
        self.max_pack
    }

    /// The most positions one step can hold: `packs_per_step` times the largest
    /// pack (IID may draw one pack several times in a step).
    pub fn capacity(&self) -> Result<usize> {
        self.packs_per_step
            .checked_mul(self.max_pack)
            .filter(|&n| n <= isize::MAX as usize / 8)
            .ok_or_else(|| {
                Error(format!(
                    "a step of {} packs of up to {} records does not fit in memory",
                    self.packs_per_step, self.max_pack
                ))
            })
    }

    /// The plan pack that pack number `g` of the sequence is.
    fn pack_of(&self, g: u128, pass_order: &mut Option<(u64, Feistel)>) -> Result<u64> {
        let p = self.packs();
        Ok(match self.mode {
            Mode::Sequential => (g % p as u128) as u64,
            Mode::Iid => reduce(stream_key(self.seed, TAG_PACK_IID, g as u64), p),
            Mode::Cyclic => {
                // The pass number modulo 2^64; it can only wrap when a step
                // holds more packs than the plan.
                let pass = (g / p as u128) as u64;
                let within = (g % p as u128) as u64;
                if pass_order.as_ref().is_none_or(|(q, _)| *q != pass) {
                    let f = Feistel::keyed(p, stream_key(self.seed, TAG_PACK_ORDER, pass))?;
                    *pass_order = Some((pass, f));
                }
                let (_, f) = pass_order.as_ref().ok_or_else(|| Error("no pass".into()))?;
                f.permute(within)
                    .ok_or_else(|| Error(format!("pack {within} outside the plan")))?
            }
        })
    }

    /// Writes the positions of `step`'s packs into `out`, pack after pack, and
    /// `offsets[k]..offsets[k + 1]` of `out` as pack `k`; returns how many
    /// positions were written. `out` must hold [`Packing::capacity`] items and
    /// `offsets` exactly `packs_per_step + 1`.
    pub fn fill(&self, step: u64, out: &mut [u64], offsets: &mut [i64]) -> Result<usize> {
        if offsets.len() != self.packs_per_step + 1 {
            return Err(Error(format!(
                "offsets hold {} items, a step has {} packs",
                offsets.len(),
                self.packs_per_step
            )));
        }
        let first = step as u128 * self.packs_per_step as u128;
        let mut pass_order = None;
        let mut at = 0usize;
        offsets[0] = 0;
        for (k, o) in offsets[1..].iter_mut().enumerate() {
            let pack = self.pack_of(first + k as u128, &mut pass_order)? as usize;
            let (a, b) = (self.starts[pack], self.starts[pack + 1]);
            let n = (b - a) as usize;
            let dst = out
                .get_mut(at..at + n)
                .ok_or_else(|| Error(format!("output holds {} items, too few", at)))?;
            match (self.order.is_empty(), self.positions.is_empty()) {
                (true, true) => {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = a + i as u64;
                    }
                }
                (true, false) => dst.copy_from_slice(&self.positions[a as usize..b as usize]),
                (false, true) => dst.copy_from_slice(&self.order[a as usize..b as usize]),
                (false, false) => {
                    for (d, &j) in dst.iter_mut().zip(&self.order[a as usize..b as usize]) {
                        *d = self.positions[j as usize];
                    }
                }
            }
            at += n;
            *o = at as i64;
        }
        Ok(at)
    }
}

/// xxh3-64 of `lengths` as little-endian u64s, hashed a run at a time.
fn digest(lengths: &[u64]) -> u64 {
    let mut h = Xxh3::new();
    let mut bytes = [0u8; 8 * 512];
    for run in lengths.chunks(512) {
        for (b, l) in bytes.chunks_exact_mut(8).zip(run) {
            b.copy_from_slice(&l.to_le_bytes());
        }
        h.update(&bytes[..8 * run.len()]);
    }
    h.digest()
}

/// SEQUENTIAL's plan: the records in position order, a new pack begun whenever
/// the next record does not fit in the current one.
fn next_fit(lengths: &[u64], budget: u64) -> Result<Vec<u64>> {
    let mut starts = Vec::new();
    starts.try_reserve(1).map_err(|_| oom("pack offsets", 1))?;
    starts.push(0u64);
    let mut used = 0u64;
    for (i, &l) in lengths.iter().enumerate() {
        let e = l.min(budget);
        // used <= budget, so budget - used cannot underflow.
        if e > budget - used {
            starts
                .try_reserve(1)
                .map_err(|_| oom("pack offsets", starts.len() + 1))?;
            starts.push(i as u64);
            used = 0;
        }
        used += e;
    }
    starts.push(lengths.len() as u64);
    Ok(starts)
}

/// CYCLIC's and IID's plan: the records in the order of the plan bijection,
/// each window of [`PACK_WINDOW`] of them packed first-fit decreasing.
fn windowed_first_fit(lengths: &[u64], budget: u64, seed: u64) -> Result<(Vec<u64>, Vec<u64>)> {
    let n = lengths.len();
    let mut order = zeroed::<u64>(n, "the plan's record order")?;
    let plan = Feistel::keyed(n as u64, stream_key(seed, TAG_PACK_PLAN, 0))?;
    let windows = n.div_ceil(PACK_WINDOW);
    let threads = if windows < PARALLEL_FROM_WINDOWS {
        1
    } else {
        thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(windows)
    };
    let per_thread = windows.div_ceil(threads) * PACK_WINDOW;
    // Each thread permutes and packs its own run of windows in place and returns
    // the record count of each pack, in order.
    let counts: Vec<Result<Vec<u32>>> = thread::scope(|s| {
        let handles: Vec<_> = order
            .chunks_mut(per_thread)
            .enumerate()
            .map(|(t, part)| {
                let plan = &plan;
                s.spawn(move || pack_windows(plan, (t * per_thread) as u64, part, lengths, budget))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error("a packing thread failed".into())))
            })
            .collect()
    });
    let mut starts = Vec::new();
    starts
        .try_reserve(n / 2 + 2)
        .map_err(|_| oom("pack offsets", n))?;
    starts.push(0u64);
    let mut at = 0u64;
    for c in counts {
        for k in c? {
            at += u64::from(k);
            starts.push(at);
        }
    }
    Ok((order, starts))
}

/// Fills `part` (the plan positions `first..first + part.len()`, a whole number
/// of windows but perhaps the last) with its records packed window by window;
/// returns each pack's record count.
fn pack_windows(
    plan: &Feistel,
    first: u64,
    part: &mut [u64],
    lengths: &[u64],
    budget: u64,
) -> Result<Vec<u32>> {
    fill_permuted(plan, first, part);
    let mut counts = Vec::new();
    let mut fit = FirstFit::new(PACK_WINDOW)?;
    let mut items: Vec<(Reverse<u64>, u32)> = Vec::with_capacity(PACK_WINDOW);
    let mut pack_of = vec![0u32; PACK_WINDOW];
    let mut copy = vec![0u64; PACK_WINDOW];
    for window in part.chunks_mut(PACK_WINDOW) {
        items.clear();
        let mut sum = 0u128;
        for (t, &r) in window.iter().enumerate() {
            let l = *lengths
                .get(r as usize)
                .ok_or_else(|| Error(format!("plan position {r} outside the records")))?;
            let e = l.min(budget);
            sum += e as u128;
            items.push((Reverse(e), t as u32));
        }
        // Longest first; equal lengths in window order (keys are distinct).
        items.sort_unstable();
        // First fit never leaves two packs at most half full (the later one's
        // records would have fitted in the earlier), so the other packs hold
        // over half the budget each: fewer than 2 * sum / budget + 1 packs.
        let bound = (2 * sum / budget as u128 + 2).min(window.len() as u128) as usize;
        fit.reset(budget, bound);
        let mut packs = 0usize;
        for &(Reverse(e), t) in &items {
            let p = fit.place(e)?;
            pack_of[t as usize] = p as u32;
            packs = packs.max(p + 1);
        }
        // Lay the window's records out pack after pack, each pack's in the order
        // they were placed (longest first).
        let base = counts.len();
        counts.resize(base + packs, 0u32);
        for &(_, t) in &items {
            counts[base + pack_of[t as usize] as usize] += 1;
        }
        let mut next: Vec<u32> = Vec::with_capacity(packs);
        let mut acc = 0u32;
        for &c in &counts[base..] {
            next.push(acc);
            acc += c;
        }
        copy[..window.len()].copy_from_slice(window);
        for &(_, t) in &items {
            let slot = &mut next[pack_of[t as usize] as usize];
            window[*slot as usize] = copy[t as usize];
            *slot += 1;
        }
    }
    Ok(counts)
}

/// First fit over up to `leaves` packs: a max-tree of the packs' free tokens.
/// Packs not yet opened hold the whole budget, so the leftmost leaf with room is
/// the first open pack with room, else the next new one.
struct FirstFit {
    leaves: usize,
    free: Vec<u64>,
}

impl FirstFit {
    /// A tree for up to `packs` packs.
    fn new(packs: usize) -> Result<FirstFit> {
        let leaves = packs.next_power_of_two();
        Ok(FirstFit {
            leaves,
            free: zeroed(2 * leaves, "the first-fit tree")?,
        })
    }

    /// Empties the tree for a window that needs at most `packs` packs (the tree's
    /// height follows, so a window of short records walks a shorter tree).
    fn reset(&mut self, budget: u64, packs: usize) {
        let most = self.free.len() / 2;
        self.leaves = packs.max(1).next_power_of_two().min(most);
        self.free[..2 * self.leaves].fill(budget);
    }

    /// Puts an item of `e <= budget` tokens in the first pack with room; returns
    /// the pack.
    fn place(&mut self, e: u64) -> Result<usize> {
        // The root holds the most free tokens of any pack; while fewer packs are
        // open than there are leaves, that is at least the budget.
        if self.free[1] < e {
            return Err(Error("first fit ran out of packs".into()));
        }
        let mut node = 1;
        while node < self.leaves {
            node = if self.free[2 * node] >= e {
                2 * node
            } else {
                2 * node + 1
            };
        }
        self.free[node] -= e;
        let mut up = node / 2;
        while up >= 1 {
            self.free[up] = self.free[2 * up].max(self.free[2 * up + 1]);
            up /= 2;
        }
        Ok(node - self.leaves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(p: &Packing, s: u64) -> (Vec<u64>, Vec<i64>) {
        let mut out = vec![0u64; p.capacity().unwrap()];
        let mut off = vec![0i64; p.packs_per_step() + 1];
        let n = p.fill(s, &mut out, &mut off).unwrap();
        out.truncate(n);
        (out, off)
    }

    fn lengths(n: usize, seed: u64) -> Vec<u64> {
        (0..n as u64)
            .map(|i| crate::mix64(i ^ seed) % 700)
            .collect()
    }

    #[test]
    fn first_fit_places_in_the_leftmost_pack_with_room() {
        let mut f = FirstFit::new(8).unwrap();
        f.reset(10, 8);
        assert_eq!(
            [7, 5, 3, 3, 2, 6].map(|e| f.place(e).unwrap()),
            [0, 1, 0, 1, 1, 2]
        );
        assert_eq!(f.place(0).unwrap(), 0);
        // A tree of fewer leaves: the fifth pack has nowhere to go.
        f.reset(4, 3);
        assert_eq!([4, 4, 4, 4].map(|e| f.place(e).unwrap()), [0, 1, 2, 3]);
        assert!(f.place(1).is_err());
    }

    #[test]
    fn every_mode_keeps_the_budget_and_cyclic_passes_are_exact() {
        for n in [1usize, 2, 7, 4096, 4097, 10_000] {
            let ls = lengths(n, n as u64);
            for mode in Mode::ALL {
                for budget in [1u64, 700, 2048] {
                    let p = Packing::new(ls.clone(), budget, 3, mode, 9, Long::Truncate).unwrap();
                    let packs = p.packs();
                    let steps = (2 * packs).div_ceil(3) + 1;
                    let mut seen = vec![0u32; n];
                    for s in 0..steps {
                        let (out, off) = step(&p, s);
                        for k in 0..3 {
                            let pack = &out[off[k] as usize..off[k + 1] as usize];
                            assert!(!pack.is_empty());
                            let sum: u64 = pack.iter().map(|&r| ls[r as usize].min(budget)).sum();
                            assert!(sum <= budget);
                            let g = s * 3 + k as u64;
                            if mode != Mode::Iid && g < 2 * packs {
                                for &r in pack {
                                    seen[r as usize] += 1;
                                }
                            }
                        }
                    }
                    if mode != Mode::Iid {
                        assert!(seen.iter().all(|&c| c == 2), "{n} {mode:?} {budget}");
                    }
                }
            }
        }
    }

    #[test]
    fn sequential_is_next_fit_in_order() {
        let p = Packing::new(
            vec![3, 4, 2, 9, 0, 1],
            6,
            2,
            Mode::Sequential,
            0,
            Long::Truncate,
        )
        .unwrap();
        assert_eq!(p.packs(), 4);
        assert_eq!(step(&p, 0), (vec![0, 1, 2], vec![0, 1, 3]));
        assert_eq!(step(&p, 1), (vec![3, 4, 5], vec![0, 2, 3]));
        assert_eq!(step(&p, 2), (vec![0, 1, 2], vec![0, 1, 3]));
        assert_eq!(p.tokens(), 3 + 4 + 2 + 6 + 1);
        assert_eq!(p.max_pack(), 2);
    }

    #[test]
    fn positions_rename_the_items_of_the_plan_over_their_lengths() {
        let ls = lengths(5000, 3);
        let pos: Vec<u64> = (0..5000u64).map(|j| (j * 7919) % 1234).collect();
        for mode in Mode::ALL {
            let plain = Packing::new(ls.clone(), 700, 4, mode, 2, Long::Truncate).unwrap();
            let over =
                Packing::over(ls.clone(), pos.clone(), 700, 4, mode, 2, Long::Truncate).unwrap();
            assert_eq!(over.packs(), plain.packs());
            for s in [0u64, 1, 17, 1 << 40] {
                let (a, off_a) = step(&plain, s);
                let (b, off_b) = step(&over, s);
                assert_eq!(off_a, off_b);
                let renamed: Vec<u64> = a.iter().map(|&j| pos[j as usize]).collect();
                assert_eq!(renamed, b);
            }
        }
        let e = Packing::over(vec![1, 9], vec![4, 6], 4, 1, Mode::Cyclic, 0, Long::Error);
        assert_eq!(
            e.unwrap_err().0,
            "long=\"error\": record 6 has length 9, over tokens_per_pack (4)"
        );
        let e = Packing::over(vec![1, 2], vec![4], 4, 1, Mode::Cyclic, 0, Long::Error);
        assert_eq!(
            e.unwrap_err().0,
            "1 positions for 2 lengths; give one length per position"
        );
    }

    #[test]
    fn errors_name_the_argument() {
        let e = |r: Result<Packing>| r.unwrap_err().0;
        assert!(e(Packing::new(vec![], 4, 1, Mode::Cyclic, 0, Long::Truncate)).contains("lengths"));
        assert!(
            e(Packing::new(vec![1], 0, 1, Mode::Cyclic, 0, Long::Truncate))
                .contains("tokens_per_pack")
        );
        assert!(
            e(Packing::new(vec![1], 4, 0, Mode::Cyclic, 0, Long::Truncate))
                .contains("packs_per_step")
        );
        assert_eq!(
            e(Packing::new(
                vec![1, 5, 9],
                4,
                1,
                Mode::Cyclic,
                0,
                Long::Error
            )),
            "long=\"error\": record 1 has length 5, over tokens_per_pack (4)"
        );
        assert!(Packing::new(vec![1, 4], 4, 1, Mode::Cyclic, 0, Long::Error).is_ok());
        assert!(e(Packing::new(
            vec![0; 10],
            4,
            usize::MAX,
            Mode::Cyclic,
            0,
            Long::Truncate
        ))
        .contains("does not fit in memory"));
    }
}
