"""MixtureSampler: exact values against the pure-Python model of the documented
algorithm, the mixture's proportions, each range's traversal, O(1) seek,
pickling, determinism across processes, and exact resume through the Loader."""

from __future__ import annotations

import copy
import json
import math
import pickle
import random
import subprocess
import sys

import mixture_reference as mref
import numpy as np
import pytest
import sampler_reference as ref

from conftest import host
from loaderx import InvalidArgumentError, MixtureSampler, Sampler
from loaderx.dataloader import Loader
from loaderx.zrecord import Dense

SEQ, IID, CYC = Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC


def draw(s: MixtureSampler, steps: int) -> np.ndarray:
    """``steps`` consecutive batches as one (steps, B) copy."""
    return np.stack([s.next().copy() for _ in range(steps)])


def range_ids(values: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """The index of the range holding each value; fails if one lies in none."""
    out = np.full(values.shape, -1)
    for r, (a, b) in enumerate(ranges):
        out[(values >= a) & (values < b)] = r
    assert (out >= 0).all(), "a position outside every range"
    return out


def within_binomial(counts: np.ndarray, weights: list[float], sigmas: float = 5.0) -> bool:
    """Whether every range's count of ``counts.sum()`` draws lies within
    ``sigmas`` binomial standard deviations of its share of the weights."""
    n = int(counts.sum())
    total = sum(weights)
    for c, w in zip(counts.tolist(), weights, strict=True):
        p = w / total
        sd = math.sqrt(n * p * (1 - p))
        if abs(c - n * p) > sigmas * sd + 1e-9:
            return False
    return True


# --------------------------------------------------------------------------- #
# Exact values


def model_args(rng: random.Random):
    n = rng.randint(1, 5)
    lengths = [rng.choice([1, 2, 3, 7, 10, 64, 1000]) for _ in range(n)]
    gaps = [rng.choice([0, 5, 2**40]) for _ in range(n)]
    ranges, at = [], 0
    for length, gap in zip(lengths, gaps, strict=True):
        at += gap
        ranges.append((at, at + length))
        at += length
    rng.shuffle(ranges)
    if rng.random() < 0.5:
        weights = [rng.randint(0, 12) for _ in range(n)]
        if sum(weights) == 0:
            weights[0] = 1
    else:  # float weights whose integer form stays small enough to count slot by slot
        weights = [rng.choice([0.0, 0.125, 0.25, 0.375, 0.5, 1.5]) for _ in range(n)]
        if sum(weights) == 0:
            weights[-1] = 0.25
    modes = [rng.choice([SEQ, IID, CYC]) for _ in range(n)]
    return ranges, weights, rng.choice([1, 2, 5, 16, 33]), modes, rng.getrandbits(64)


def test_batches_equal_the_model_of_the_documented_algorithm():
    rng = random.Random(20261201)
    for _ in range(60):
        ranges, weights, batch_size, modes, seed = model_args(rng)
        s = MixtureSampler(ranges, weights, batch_size, modes, seed=seed)
        m = mref.Mixture(ranges, weights, batch_size, [mode.name for mode in modes], seed)
        assert s.config()["weights"] == m.weights
        for step in [0, 1, 2, rng.randrange(1000), rng.randrange(2**64)]:
            s.seek(step)
            assert s.next().tolist() == m.batch(step), (ranges, weights, modes, step)


def test_float_weights_become_the_documented_integers():
    cases = [
        [0.7, 0.2, 0.1],
        [1e-300, 3e-300, 0.0],
        [2.0, 3],  # an int among floats takes the float path
        [1e12, 1.0, 0.5],
        [np.float32(0.1), np.float64(0.9)],
    ]
    for weights in cases:
        s = MixtureSampler.from_lengths([5] * len(weights), weights, 4)
        assert s.config()["weights"] == mref.integer_weights([float(w) for w in weights])
    assert MixtureSampler.from_lengths([5, 5], [0.75, 0.25], 4).config()["weights"] == [3, 1]
    # Integers are exact, divided by their greatest common divisor.
    assert MixtureSampler.from_lengths([5, 5], [10**17, 3 * 10**17], 4).config()["weights"] == [
        1,
        3,
    ]
    # Integers beyond 128 bits are taken as floats on the float path, ratio kept.
    huge = [2**200, 2**199, 0.0]
    assert MixtureSampler.from_lengths([5] * 3, huge, 4).config()["weights"] == [2, 1, 0]
    numpy_ints = [np.int64(6), np.uint8(4)]
    assert MixtureSampler.from_lengths([5, 5], numpy_ints, 4).config()["weights"] == [3, 2]


def test_large_totals_use_the_documented_stride():
    # Too large for the model's slot-by-slot visit counts, but each slot's range
    # only needs the stride.
    ranges = [(0, 1), (1, 2), (2, 3)]
    for weights in ([0.7, 0.2, 0.1], [10**12 + 39, 1, 7], [2**62, 3, 2**61 - 1]):
        s = MixtureSampler(ranges, weights, 64, SEQ)
        m = mref.Mixture(ranges, weights, 64, [ref.SEQUENTIAL] * 3, 0)
        assert mref.largest_partial_quotient(m.stride, m.total) <= 12
        for step in [0, 5, 2**64 - 1]:
            s.seek(step)
            want = [m.range_of_slot(step * 64 + i) for i in range(64)]
            assert s.next().tolist() == want


# --------------------------------------------------------------------------- #
# Proportions


def test_the_binomial_check_tells_right_weights_from_wrong_ones():
    rng = np.random.default_rng(0)
    weights = [0.6, 0.3, 0.1]
    honest = rng.multinomial(100_000, [0.6, 0.3, 0.1])
    assert within_binomial(honest, weights)
    assert not within_binomial(honest, [0.1, 0.3, 0.6])
    assert not within_binomial(rng.multinomial(100_000, [0.58, 0.32, 0.1]), weights)


@pytest.mark.parametrize("mode", [SEQ, IID, CYC])
def test_observed_proportions_match_the_weights(mode):
    # Range lengths far from proportional to the weights, so that drawing by
    # length (or uniformly over the union) would fail.
    ranges = [(0, 1000), (5000, 5010), (7000, 7300)]
    weights = [0.6, 0.3, 0.1]
    s = MixtureSampler(ranges, weights, 64, mode, seed=3)
    s.seek(987_654_321)
    values = draw(s, 2000)
    counts = np.bincount(range_ids(values, ranges).ravel(), minlength=3)
    assert within_binomial(counts, weights)
    assert not within_binomial(counts, [0.1, 0.3, 0.6])  # swapped
    assert not within_binomial(counts, [1000, 10, 300])  # by range length
    # Stronger than binomial: deterministic apportionment keeps every range
    # within a few slots of its share at every step.
    ids = range_ids(values, ranges)
    share = np.array(s.config()["weights"], dtype=float)
    share /= share.sum()
    cum = np.stack([np.cumsum((ids == r).sum(axis=1)) for r in range(3)], axis=1)
    drift = cum - np.arange(1, 2001)[:, None] * 64 * share
    assert (drift.max(axis=0) - drift.min(axis=0)).max() < 8


def test_each_batch_and_each_contiguous_slice_hold_the_shares():
    ranges = [(0, 50), (50, 100), (100, 150), (150, 200)]
    exact = MixtureSampler(ranges, [1, 2, 3, 4], 40, IID, seed=11)
    close = MixtureSampler(ranges, [0.1, 0.2, 0.3, 0.4], 40, IID, seed=11)
    assert close.config()["weights"] != [1, 2, 3, 4]  # 0.1 etc. are not exact binary
    for step in [0, 1, 77, 2**63]:
        for s, tolerance in ((exact, 0), (close, 2)):
            s.seek(step)
            ids = range_ids(s.next(), ranges)
            counts = np.bincount(ids, minlength=4)
            assert np.abs(counts - [4, 8, 12, 16]).max() <= tolerance
            for half in (ids[:20], ids[20:]):  # what two bindings would receive
                counts = np.bincount(half, minlength=4)
                assert np.abs(counts - [2, 4, 6, 8]).max() <= tolerance


def test_shares_hold_at_every_step_for_random_configurations():
    # 2 to 32 ranges, float or integer weights (up to 10**15), batch sizes up to
    # 4,096, anywhere in the sequence: each batch within 3 slots of B * w_r / W,
    # and each range's running count within a band of 5 slots around n * w_r / W.
    rng = random.Random(5)
    worst_batch = worst_band = 0.0
    for trial in range(60):
        r = rng.randint(2, 32)
        if trial % 2:
            weights = [rng.random() for _ in range(r)]
        else:
            weights = [rng.randint(1, 10 ** rng.randint(1, 15)) for _ in range(r)]
        b = rng.choice([7, 64, 256, 4096])
        s = MixtureSampler.from_lengths([10] * r, weights, b, SEQ, seed=trial)
        share = np.array(s.config()["weights"], dtype=float)
        share /= share.sum()
        s.seek(rng.randrange(2**60))
        per = np.array([np.bincount(s.next() // 10, minlength=r) for _ in range(100)])
        worst_batch = max(worst_batch, float(np.abs(per - b * share).max()))
        drift = np.vstack([np.zeros(r), per.cumsum(0) - np.arange(1, 101)[:, None] * b * share])
        worst_band = max(worst_band, float((drift.max(0) - drift.min(0)).max()))
    assert worst_batch < 3
    assert worst_band < 5


def test_integer_weights_are_exact_over_every_period():
    ranges = [(0, 10), (10, 20), (20, 30)]
    s = MixtureSampler(ranges, [5, 2, 3], 7, IID, seed=1)
    ids = range_ids(draw(s, 100), ranges).ravel()  # 700 slots
    for start in [0, 3, 17, 690 - 10]:
        np.testing.assert_array_equal(np.bincount(ids[start : start + 10], minlength=3), [5, 2, 3])


def test_a_zero_weight_range_is_never_drawn():
    ranges = [(0, 10), (10, 20), (20, 30)]
    for weights in ([1, 0, 1], [0.0, 0.5, 2.0]):
        s = MixtureSampler(ranges, weights, 32, CYC, seed=2)
        s.seek(123_456)
        ids = range_ids(draw(s, 300), ranges)
        zero = weights.index(0)
        assert not (ids == zero).any()
        assert all((ids == r).any() for r in range(3) if r != zero)


# --------------------------------------------------------------------------- #
# Traversal of each range


def test_every_position_lies_in_its_range():
    ranges = [(2**63, 2**64 - 1), (0, 3), (100, 101), (10, 20)]
    s = MixtureSampler(ranges, [1, 1, 1, 1], 50, [IID, CYC, SEQ, CYC], seed=9)
    for step in [0, 1, 2**64 - 2]:
        s.seek(step)
        range_ids(s.next(), ranges)


def per_range_sequence(values: np.ndarray, ranges, r: int) -> np.ndarray:
    """The positions drawn from range ``r``, in the order they were drawn."""
    flat = values.ravel()
    return flat[range_ids(flat, ranges) == r]


def test_cyclic_ranges_visit_each_position_once_per_pass():
    ranges = [(0, 97), (1000, 1013), (5000, 5256)]
    s = MixtureSampler(ranges, [3, 1, 2], 24, CYC, seed=4)
    values = draw(s, 600)  # 14,400 slots: about 75 passes of the 97, 46 of the 13
    passes_seen = []
    for r, (a, b) in enumerate(ranges):
        seq = per_range_sequence(values, ranges, r)
        length = b - a
        passes = [seq[i : i + length] for i in range(0, len(seq) - length + 1, length)]
        assert len(passes) >= 10
        for p in passes:
            np.testing.assert_array_equal(np.sort(p), np.arange(a, b))
        passes_seen.append(passes)
    # A fresh permutation each pass.
    assert not np.array_equal(passes_seen[0][0], passes_seen[0][1])


def test_sequential_ranges_walk_in_order_and_iid_ranges_repeat():
    ranges = [(10, 15), (100, 200)]
    s = MixtureSampler(ranges, [1, 1], 10, [SEQ, IID], seed=0)
    values = draw(s, 50)
    seq = per_range_sequence(values, ranges, 0)
    np.testing.assert_array_equal(seq, 10 + np.arange(len(seq)) % 5)
    iid = per_range_sequence(values, ranges, 1)
    assert len(np.unique(iid)) < len(iid)  # 250 draws from 100 positions repeat


# --------------------------------------------------------------------------- #
# Contract shared with Sampler


def test_seek_then_next_equals_replaying():
    ranges = [(0, 30), (30, 31), (40, 1040)]
    s = MixtureSampler(ranges, [0.5, 0.1, 0.4], 9, [CYC, SEQ, IID], seed=5)
    replay = draw(s, 400)
    rng = random.Random(7)
    for step in rng.sample(range(400), 25) + [0, 399]:
        s.seek(step)
        np.testing.assert_array_equal(s.next(), replay[step])
        if step < 399:
            np.testing.assert_array_equal(s.next(), replay[step + 1])


def test_a_batch_of_2b_is_two_batches_of_b_also_with_the_gil_released():
    # Every slot depends only on its global index, so batch sizes chunk one
    # sequence; 70,000 positions are filled with the GIL released.
    ranges = [(0, 1000), (2000, 2500), (10_000, 1_000_000)]
    modes = [CYC, IID, CYC]
    big = MixtureSampler(ranges, [2, 1, 3], 70_000, modes, seed=8)
    small = MixtureSampler(ranges, [2, 1, 3], 35_000, modes, seed=8)
    big.seek(3)
    small.seek(6)
    halves = [small.next().copy(), small.next().copy()]
    np.testing.assert_array_equal(big.next(), np.concatenate(halves))


def test_next_returns_one_reused_buffer():
    s = MixtureSampler([(0, 10), (10, 20)], [1, 1], 6, IID)
    a = s.next()
    first = a.copy()
    b = next(s)
    assert a is b and a.dtype == np.uint64 and a.shape == (6,) and a.flags.c_contiguous
    assert not np.array_equal(first, b)
    assert iter(s) is s
    assert s.batch_size == 6


def test_pickle_and_copy_continue_at_the_step():
    s = MixtureSampler([(0, 10), (50, 70)], [0.3, 0.7], 5, [CYC, IID], seed=12)
    draw(s, 7)
    for clone in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert type(clone) is MixtureSampler
        assert clone.config() == s.config()
        assert repr(clone) == repr(s)
        np.testing.assert_array_equal(draw(clone, 5), draw(copy.copy(s), 5))
    assert "at step 7" in repr(s)
    # The last step: drawn, then pickled, the clone refuses to draw again.
    s.seek(2**64 - 1)
    s.next()
    clone = pickle.loads(pickle.dumps(s))
    with pytest.raises(OverflowError, match="last step"):
        clone.next()


def test_same_seed_same_batches_in_another_process():
    def made(seed: int) -> MixtureSampler:
        ranges = [(0, 100), (200, 210), (300, 1300)]
        return MixtureSampler(ranges, [3, 1, 2.5], 16, [CYC, SEQ, IID], seed=seed)

    code = (
        "from loaderx import MixtureSampler, Sampler\n"
        "M = Sampler.Mode\n"
        "s = MixtureSampler([(0, 100), (200, 210), (300, 1300)], [3, 1, 2.5], 16,\n"
        "                   [M.CYCLIC, M.SEQUENTIAL, M.IID], seed=99)\n"
        "s.seek(10**12)\n"
        "print([s.next().tolist() for _ in range(3)])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    theirs = json.loads(out)
    here = made(99)
    here.seek(10**12)
    assert theirs == [here.next().tolist() for _ in range(3)]
    other = made(98)
    other.seek(10**12)
    assert other.next().tolist() != theirs[0]


# --------------------------------------------------------------------------- #
# Errors


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(weights=[1, -1, 1]), InvalidArgumentError, r"weights\[1\] is negative \(-1\)"),
        (dict(weights=[1, -0.5, 1]), InvalidArgumentError, r"weights\[1\] is negative"),
        (dict(weights=[1, math.nan, 1]), InvalidArgumentError, r"weights\[1\] is NaN"),
        (dict(weights=[math.inf, 1, 1]), InvalidArgumentError, r"weights\[0\] is infinite"),
        (dict(weights=[0, 0, 0]), InvalidArgumentError, "must not all be zero"),
        (dict(weights=[0.0, 0, 0]), InvalidArgumentError, "must not all be zero"),
        (dict(weights=[1.0, 1e-20, 0]), InvalidArgumentError, r"weights\[1\] .* is positive"),
        (dict(weights=[2**63, 2**63, 1]), InvalidArgumentError, "more than 2\\^63"),
        (dict(weights=[2**200, 1, 1]), InvalidArgumentError, "more than 2\\^63"),
        (dict(weights=[-(2**200), 1, 1]), InvalidArgumentError, r"weights\[0\] is negative"),
        (dict(weights=[10**400, 1, 1.0]), InvalidArgumentError, "beyond the range of a float"),
        (dict(weights=[1, 1]), InvalidArgumentError, "2 weights for 3 ranges"),
        (dict(weights=[1, True, 1]), TypeError, r"weights\[1\] must be a number, not bool"),
        (dict(weights=[1, "2", 1]), TypeError, r"weights\[1\] must be a real number, got str"),
        (dict(weights=5), TypeError, "weights must be a sequence, got int"),
        (dict(ranges=[(0, 10), (10, 10), (30, 40)]), InvalidArgumentError, r"ranges\[1\] .* empty"),
        (dict(ranges=[(5, 4), (10, 20), (30, 40)]), InvalidArgumentError, r"ranges\[0\] .* empty"),
        (
            dict(ranges=[(0, 10), (30, 40), (5, 20)]),
            InvalidArgumentError,
            r"ranges\[0\] = \(0, 10\) and ranges\[2\] = \(5, 20\) overlap",
        ),
        (dict(ranges=[(0, 10), (0, 10), (30, 40)]), InvalidArgumentError, "overlap"),
        (dict(ranges=[(0, 10), (-5, 0), (30, 40)]), InvalidArgumentError, r"start of ranges\[1\]"),
        (dict(ranges=[(0, 10), (20, 2**64), (30, 40)]), InvalidArgumentError, r"stop of ranges"),
        (dict(ranges=[(0, 10), (10,), (30, 40)]), TypeError, r"ranges\[1\] must be a \(start, s"),
        (dict(ranges=[], weights=[]), InvalidArgumentError, "ranges must not be empty"),
        (dict(ranges=5), TypeError, r"ranges must be a sequence of \(start, stop\) pairs, got int"),
        (dict(batch_size=0), InvalidArgumentError, r"batch_size must be an integer in \[1, "),
        (dict(batch_size=2**32), InvalidArgumentError, r"batch_size must be below 2\^32"),
        (dict(batch_size=2.0), TypeError, "batch_size must be an integer, got float"),
        (dict(seed=-1), InvalidArgumentError, r"seed must be an integer in \[0, 2\*\*64 - 1\]"),
        (dict(mode=[IID, IID]), InvalidArgumentError, "2 modes for 3 ranges"),
        (dict(mode=1), TypeError, "mode must be a Sampler.Mode or a sequence of them"),
        (dict(mode=[IID, 1, IID]), TypeError, "mode must be a Sampler.Mode or a sequence"),
    ],
)
def test_invalid_arguments(kwargs, exc, match):
    args = dict(
        ranges=[(0, 10), (10, 20), (30, 40)], weights=[1, 2, 3], batch_size=4, mode=IID, seed=0
    )
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        MixtureSampler(**args)


def test_from_lengths_lays_the_parts_end_to_end():
    s = MixtureSampler.from_lengths([3, np.int64(2), 4], [1, 1, 1], 3, SEQ)
    assert s.config()["mixture"] == [[0, 3], [3, 5], [5, 9]]
    with pytest.raises(InvalidArgumentError, match=r"lengths\[1\] must be at least 1, got 0"):
        MixtureSampler.from_lengths([3, 0], [1, 1], 2)
    with pytest.raises(TypeError, match=r"lengths\[0\] must be an integer, got float"):
        MixtureSampler.from_lengths([3.0, 1], [1, 1], 2)


def test_seek_arguments():
    s = MixtureSampler([(0, 3)], [1], 2)
    with pytest.raises(InvalidArgumentError, match=r"step .* got -1"):
        s.seek(-1)
    with pytest.raises(TypeError, match="step must be an integer"):
        s.seek(1.5)


# --------------------------------------------------------------------------- #
# Through the Loader

N = 90


@pytest.fixture(scope="module")
def labels(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixture") / "label"
    with Dense.create(path, np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    reader = Dense.open(path)
    yield reader
    reader.close()


def mixture() -> MixtureSampler:
    return MixtureSampler.from_lengths([50, 30, 10], [0.5, 0.2, 0.3], 8, [CYC, IID, SEQ], seed=6)


def labels_of(batch) -> list[list[int]]:
    return [host(shard["label"]).tolist() for shard in batch]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_resumes_a_mixture_exactly(labels, workers):
    streams = {"label": [labels, labels]}
    with Loader(streams, mixture(), workers=workers) as a:
        seen = [labels_of(next(a)) for _ in range(13)]
        state = a.state_dict()
        want = [labels_of(next(a)) for _ in range(9)]
    # What the loader delivers is what the sampler draws, split over two bindings.
    direct = mixture()
    for got in seen + want:
        batch = direct.next().tolist()
        assert got == [batch[:4], batch[4:]]
    assert state["sampler"] == json.loads(json.dumps(mixture().config()))
    restored = json.loads(json.dumps(state))
    with Loader(streams, mixture(), workers=workers) as b:
        b.load_state_dict(restored)
        assert [labels_of(next(b)) for _ in range(9)] == want
        assert b.state_dict()["step"] == 22


def test_the_loader_refuses_a_state_of_another_mixture(labels):
    streams = {"label": [labels]}
    with Loader(streams, mixture(), workers=0) as a:
        next(a)
        state = a.state_dict()
    other = MixtureSampler.from_lengths([50, 30, 10], [0.5, 0.3, 0.2], 8, [CYC, IID, SEQ], seed=6)
    with Loader(streams, other, workers=0) as b:
        with pytest.raises(ValueError, match="the state was taken with sampler"):
            b.load_state_dict(state)


def test_the_loader_checks_the_batch_size_against_the_bindings(labels):
    with pytest.raises(ValueError, match="batch size 8 does not divide by the 3"):
        Loader({"label": [labels] * 3}, mixture(), workers=0)
