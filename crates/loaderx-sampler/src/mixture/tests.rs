//! Mixtures: weights to counts, draws per range, resume, and refusals.

use super::*;

fn ints(w: &[i128]) -> Vec<Weight> {
    w.iter().map(|&v| Weight::Int(v)).collect()
}

fn mixture(ranges: &[(u64, u64)], w: &[i128], batch: usize, mode: Mode) -> Mixture {
    Mixture::new(ranges, &ints(w), batch, &vec![mode; ranges.len()], 7).expect("mixture")
}

fn batch(m: &Mixture, step: u64) -> Vec<u64> {
    let mut scratch = m.scratch().expect("scratch");
    let mut out = vec![0; m.batch()];
    m.fill(step, &mut out, &mut scratch).expect("fill");
    out
}

fn range_index(ranges: &[(u64, u64)], v: u64) -> usize {
    ranges
        .iter()
        .position(|&(a, b)| a <= v && v < b)
        .expect("in a range")
}

#[test]
fn floor_sum_matches_brute_force() {
    for m in 1..40u128 {
        for a in 0..45u128 {
            for b in [0u128, 1, m - 1, m, 2 * m + 3] {
                for n in [0u128, 1, 2, 7, 40] {
                    let want: u128 = (0..n).map(|i| (a * i + b) / m).sum();
                    assert_eq!(floor_sum(n, m, a, b), Some(want), "{n} {m} {a} {b}");
                }
            }
        }
    }
    // The largest arguments a mixture passes: W = 2^63, n < W.
    let w = 1u128 << 63;
    assert!(floor_sum(w - 1, w, w - 1, w).is_some());
}

#[test]
fn stride_is_coprime_and_near_golden() {
    assert_eq!(stride(1), 0);
    assert_eq!(stride(2), 1);
    for w in 2..3000u64 {
        let g = stride(w);
        assert!(g >= 1 && g < w);
        assert_eq!(gcd(g, w), 1);
        let golden = ((w as u128 * GAMMA as u128) >> 64) as i64;
        assert!(
            (g as i64 - golden).abs() <= STRIDE_SPAN as i64,
            "w={w} g={g}"
        );
        assert!(largest_partial_quotient(g, w) <= 6, "w={w} g={g}");
    }
    let g = stride(MAX_TOTAL_WEIGHT);
    assert_eq!(gcd(g, MAX_TOTAL_WEIGHT), 1);
    assert_eq!(largest_partial_quotient(3, 10), 3); // 3/10 = [0; 3, 3]
    assert_eq!(largest_partial_quotient(1, 7), 7);
}

#[test]
fn visits_before_counts_earlier_slots_exactly() {
    for w in [
        &[1i128][..],
        &[3, 1],
        &[1, 1, 1],
        &[5, 0, 2, 9],
        &[1, 1000],
        &[7, 11, 13, 0, 2],
    ] {
        let ranges: Vec<(u64, u64)> = (0..w.len() as u64)
            .map(|r| (r * 100, r * 100 + 50))
            .collect();
        let m = mixture(&ranges, w, 5, Mode::Iid);
        let mut seen = vec![0u128; w.len()];
        let mut got = vec![0u128; w.len()];
        for n in 0..3000u128 {
            m.visits_before(n, &mut got).expect("count");
            assert_eq!(got, seen, "w={w:?} n={n}");
            seen[m.range_of_slot(n)] += 1;
        }
    }
}

#[test]
fn every_period_holds_each_range_exactly_its_weight() {
    let w = [5i128, 0, 2, 9, 1];
    let ranges: Vec<(u64, u64)> = (0..5).map(|r| (r * 10, r * 10 + 10)).collect();
    let m = mixture(&ranges, &w, 3, Mode::Iid);
    let total = m.total_weight() as u128;
    for start in [0u128, 1, 5, 16, 1 << 70] {
        let mut counts = [0i128; 5];
        for n in start..start + total {
            counts[m.range_of_slot(n)] += 1;
        }
        assert_eq!(counts, w);
    }
}

#[test]
fn cumulative_counts_track_large_weights_closely() {
    // Float-like weights: W near 2^47, checked far into the sequence.
    let w = ints(&[
        70_368_744_177_664 / 10 * 7,
        70_368_744_177_664 / 10 * 2,
        70_368_744_177_664 / 10,
    ]);
    let ranges = [(0u64, 10u64), (10, 20), (20, 30)];
    let m = Mixture::new(&ranges, &w, 64, &[Mode::Iid; 3], 1).expect("m");
    let total = m.total_weight() as f64;
    let mut visits = [0u128; 3];
    for n in [1000u128, 123_456_789, 1 << 40, 1 << 50, 1 << 90] {
        m.visits_before(n, &mut visits).expect("count");
        for (r, &v) in visits.iter().enumerate() {
            let got = v as f64;
            let want = n as f64 * m.weights()[r] as f64 / total;
            assert!(
                (got - want).abs() < 64.0 + want * 1e-12,
                "r={r} n={n} {got} {want}"
            );
        }
    }
}

#[test]
fn batches_use_each_range_in_slot_order() {
    let ranges = [(100u64, 110u64), (0, 7), (50, 53)];
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        let m = mixture(&ranges, &[2, 3, 1], 4, mode);
        let mut per_range: Vec<Vec<u64>> = vec![Vec::new(); 3];
        for step in 0..60 {
            let out = batch(&m, step);
            for (i, &v) in out.iter().enumerate() {
                let r = range_index(&ranges, v);
                assert_eq!(r, m.range_of_slot(step as u128 * 4 + i as u128));
                per_range[r].push(v);
            }
        }
        for (r, seq) in per_range.iter().enumerate() {
            let (a, b) = ranges[r];
            let len = (b - a) as usize;
            match mode {
                Mode::Sequential => {
                    for (k, &v) in seq.iter().enumerate() {
                        assert_eq!(v, a + (k % len) as u64);
                    }
                }
                Mode::Cyclic => {
                    for pass in seq.chunks_exact(len) {
                        let mut p = pass.to_vec();
                        p.sort_unstable();
                        assert_eq!(p, (a..b).collect::<Vec<_>>());
                    }
                }
                Mode::Iid => {
                    let mut want = vec![0u64; seq.len()];
                    fill_iid_from(len as u64, m.key(r).expect("key"), 0, &mut want);
                    let want: Vec<u64> = want.iter().map(|v| v + a).collect();
                    assert_eq!(seq, &want);
                }
            }
        }
    }
}

#[test]
fn cyclic_batches_larger_than_a_range_span_several_passes() {
    let ranges = [(0u64, 3u64), (10, 12)];
    let m = mixture(&ranges, &[1, 1], 50, Mode::Cyclic);
    let out = batch(&m, 3);
    let small: Vec<u64> = out.iter().copied().filter(|&v| v < 3).collect();
    assert_eq!(small.len(), 25);
    // Visits 75 .. 99 of range 0: passes 25 .. 33, the first and last partial.
    let mut want = Vec::new();
    for k in 75u64..100 {
        want.push(
            Feistel::new(3, m.key(0).expect("k"), k / 3)
                .expect("f")
                .permute(k % 3)
                .expect("p"),
        );
    }
    assert_eq!(small, want);
}

#[test]
fn carried_counts_equal_fresh_ones() {
    let ranges = [(0u64, 7u64), (100, 1000), (2000, 2003), (5000, 5001)];
    let w = ints(&[3, 0, 5, 1]);
    let modes = [Mode::Cyclic, Mode::Iid, Mode::Cyclic, Mode::Sequential];
    for b in [1usize, 4, 9, 64] {
        let m = Mixture::new(&ranges, &w, b, &modes, 3).expect("m");
        let mut scratch = m.scratch().expect("s");
        let mut out = vec![0; b];
        for step in (0..40u64).chain([7, 8, 9, 3, u64::MAX - 2, u64::MAX - 1, u64::MAX, 0]) {
            m.fill(step, &mut out, &mut scratch).expect("fill");
            assert_eq!(out, batch(&m, step), "b={b} step={step}");
        }
    }
}

#[test]
fn a_batch_of_several_chunks_is_its_slots_one_by_one() {
    let ranges = [(0u64, 50u64), (100, 30_000), (40_000, 40_003)];
    let w = ints(&[3, 11, 2]);
    let modes = [Mode::Cyclic, Mode::Iid, Mode::Sequential];
    let big = Mixture::new(&ranges, &w, 3 * SLOT_CHUNK + 17, &modes, 4).expect("big");
    let one = Mixture::new(&ranges, &w, 1, &modes, 4).expect("one");
    let mut scratch = one.scratch().expect("s");
    for step in [0u64, 5] {
        let got = batch(&big, step);
        let first = step * big.batch() as u64;
        for (i, v) in got.iter().enumerate() {
            let mut out = [0u64];
            one.fill(first + i as u64, &mut out, &mut scratch)
                .expect("fill");
            assert_eq!(*v, out[0], "step {step} slot {i}");
        }
    }
}

#[test]
fn zero_weight_ranges_are_never_drawn() {
    let ranges = [(0u64, 5u64), (5, 10), (10, 15)];
    let m = mixture(&ranges, &[1, 0, 4], 16, Mode::Iid);
    for step in [0u64, 1, 99, u64::MAX] {
        assert!(batch(&m, step).iter().all(|&v| !(5..10).contains(&v)));
    }
}

#[test]
fn last_step_and_huge_ranges_stay_in_range() {
    let ranges = [(0u64, u64::MAX / 2), (u64::MAX / 2, u64::MAX)];
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        let m = mixture(&ranges, &[1, 2], 300, mode);
        for step in [0u64, 1, u64::MAX - 1, u64::MAX] {
            let out = batch(&m, step);
            for (i, &v) in out.iter().enumerate() {
                let r = m.range_of_slot(step as u128 * 300 + i as u128);
                assert!(ranges[r].0 <= v && v < ranges[r].1);
            }
        }
    }
}

#[test]
fn float_weights_convert_exactly() {
    let f = |w: &[f64]| integer_weights(&w.iter().map(|&v| Weight::Float(v)).collect::<Vec<_>>());
    assert_eq!(f(&[0.5, 0.5]), Ok(vec![1, 1]));
    assert_eq!(f(&[0.75, 0.25]), Ok(vec![3, 1]));
    assert_eq!(f(&[3.0, 0.0, 1.0]), Ok(vec![3, 0, 1]));
    assert_eq!(
        f(&[1e-300, 3e-300]),
        f(&[1.0, 3.0]).map(|_| {
            let (m1, e1) = decompose(1e-300);
            let (m3, e3) = decompose(3e-300);
            let top = e3 + 63 - m3.leading_zeros() as i32;
            let s = FLOAT_WEIGHT_BITS as i32 - top;
            let (a, b) = (scale_round(m1, e1 + s), scale_round(m3, e3 + s));
            let g = gcd(a, b);
            vec![a / g, b / g]
        })
    );
    // 0.7 and 0.3: the largest scaled into [2^46, 2^47), then rounded.
    let got = f(&[0.7, 0.3]).expect("w");
    let scale = (1u64 << 47) as f64; // 0.7 has floor(log2) = -1
    let (a, b) = (
        (0.7 * scale).round_ties_even() as u64,
        (0.3 * scale).round_ties_even() as u64,
    );
    assert!((1 << 46..1 << 47).contains(&a));
    let g = gcd(a, b);
    assert_eq!(got, vec![a / g, b / g]);
    // Integers mix with floats on the float path; subnormals work.
    assert_eq!(
        integer_weights(&[Weight::Int(2), Weight::Float(6.0)]),
        Ok(vec![1, 3])
    );
    assert_eq!(f(&[5e-324, 1e-323]), Ok(vec![1, 2]));
    // Integers beyond i128 keep their ratio on the float path.
    let large = [
        Weight::LargeInt(2f64.powi(200)),
        Weight::LargeInt(2f64.powi(199)),
    ];
    assert_eq!(
        integer_weights(&[large[0], large[1], Weight::Float(0.0)]),
        Ok(vec![2, 1, 0])
    );
    assert!(integer_weights(&large)
        .expect_err("too large")
        .0
        .contains("more than 2^63"));
    let negative = [Weight::LargeInt(-2f64.powi(200)), Weight::Int(1)];
    assert!(integer_weights(&negative)
        .expect_err("negative")
        .0
        .contains("is negative"));
    let beyond = [Weight::LargeInt(f64::INFINITY), Weight::Float(1.0)];
    assert!(integer_weights(&beyond)
        .expect_err("beyond")
        .0
        .contains("beyond the range"));
}

#[test]
fn rounding_is_to_nearest_even() {
    assert_eq!(scale_round(5, -1), 2); // 2.5 -> 2
    assert_eq!(scale_round(7, -1), 4); // 3.5 -> 4
    assert_eq!(scale_round(5, -2), 1); // 1.25 -> 1
    assert_eq!(scale_round(7, -2), 2); // 1.75 -> 2
    assert_eq!(scale_round(3, 4), 48);
    assert_eq!(scale_round(1 << 52, -64), 0);
}

#[test]
fn invalid_arguments_are_errors() {
    let r = [(0u64, 10u64), (10, 20)];
    let m = [Mode::Iid; 2];
    let err = |ranges: &[(u64, u64)], w: Vec<Weight>, b: usize, modes: &[Mode]| {
        Mixture::new(ranges, &w, b, modes, 0)
            .expect_err("invalid")
            .0
    };
    assert!(err(&r, ints(&[-1, 1]), 4, &m).contains("weights[0] is negative (-1)"));
    assert!(err(&r, ints(&[0, 0]), 4, &m).contains("must not all be zero"));
    let nan = vec![Weight::Float(1.0), Weight::Float(f64::NAN)];
    assert!(err(&r, nan, 4, &m).contains("weights[1] is NaN"));
    let inf = vec![Weight::Float(f64::INFINITY), Weight::Float(1.0)];
    assert!(err(&r, inf, 4, &m).contains("weights[0] is infinite"));
    let tiny = vec![Weight::Float(1.0), Weight::Float(1e-20)];
    assert!(err(&r, tiny, 4, &m).contains("weights[1] (1e-20) is positive"));
    // Shown with an exponent, not hundreds of digits.
    let tinier = vec![Weight::Float(1.0), Weight::Float(5e-324)];
    assert!(err(&r, tinier, 4, &m).contains("weights[1] (5e-324) is positive but below 2^-47"));
    let negative = vec![Weight::Float(1.0), Weight::Float(-1e-300)];
    assert!(err(&r, negative, 4, &m).ends_with("weights[1] is negative (-1e-300)"));
    let half = vec![Weight::Float(1.0), Weight::Float(-0.5)];
    assert!(err(&r, half, 4, &m).ends_with("weights[1] is negative (-0.5)"));
    assert!(err(&r, ints(&[1, 1]), 0, &m).contains("batch_size must be at least 1"));
    assert!(err(&[(5, 5), (6, 7)], ints(&[1, 1]), 1, &m).contains("ranges[0] = (5, 5) is empty"));
    assert!(err(&[(10, 20), (0, 11)], ints(&[1, 1]), 1, &m)
        .contains("ranges[0] = (10, 20) and ranges[1] = (0, 11) overlap"));
    assert!(err(&r, ints(&[1]), 1, &m).contains("1 weights for 2 ranges"));
    assert!(err(&r, ints(&[1, 1]), 1, &m[..1]).contains("1 modes for 2 ranges"));
    assert!(err(&[], vec![], 1, &[]).contains("ranges must not be empty"));
    let big = ints(&[1 << 62, (1 << 62) + 1]);
    assert!(err(&r, big, 1, &m).contains("more than 2^63"));
    assert!(err(&r, ints(&[i128::MAX, 1]), 1, &m).contains("more than 2^63"));
    // Exactly 2^63 in total is allowed, and reduced by the common divisor.
    let at_limit = mixture(&r, &[1 << 62, 1 << 62], 2, Mode::Iid);
    assert_eq!(at_limit.weights(), &[1, 1]);
    let odd = Mixture::new(&r, &ints(&[(1 << 63) - 1, 1]), 2, &m, 0).expect("limit");
    assert_eq!(odd.total_weight(), 1 << 63);
    assert!(batch(&odd, u64::MAX).iter().all(|&v| v < 20));
    // Ranges in any order; adjacent ranges are disjoint.
    assert!(Mixture::new(&[(10, 20), (0, 10)], &ints(&[1, 1]), 1, &m, 0).is_ok());
    let good = mixture(&r, &[1, 1], 4, Mode::Iid);
    let mut scratch = good.scratch().expect("s");
    assert!(good.fill(0, &mut [0; 3], &mut scratch).is_err());
    let other = mixture(&r, &[1, 1], 5, Mode::Iid);
    assert!(good
        .fill(0, &mut [0; 4], &mut other.scratch().expect("s"))
        .is_err());
}
