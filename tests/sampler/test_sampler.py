"""The stateless Sampler: API contract, exact values against the pure-Python
reference, permutation properties of CYCLIC, and statistical quality."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest
import sampler_reference as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaderx import _native
from loaderx.sampler import Sampler

SEQ, IID, CYC = Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC
MODES = [SEQ, IID, CYC]
U64_MAX = 2**64 - 1


def draw(s: Sampler, steps: int) -> np.ndarray:
    """``steps`` consecutive batches as one (steps, B) copy."""
    return np.stack([s.next().copy() for _ in range(steps)])


def cycle_values(length: int, batch_size: int, seed: int, cycle: int) -> np.ndarray:
    """All indices of one CYCLIC cycle, in draw order."""
    per_cycle = length // batch_size
    s = Sampler(length, batch_size, CYC, seed=seed)
    s.seek(cycle * per_cycle)
    return draw(s, per_cycle).ravel()


# --------------------------------------------------------------------------- #
# Statistics helpers (no SciPy): chi-square survival via Wilson-Hilferty.


def chi2_sf(stat: float, df: int) -> float:
    """P(X >= stat) for X ~ chi-square(df); the Wilson-Hilferty normal
    approximation, accurate to a few percent of p for df >= 30."""
    v = 2.0 / (9.0 * df)
    z = ((stat / df) ** (1.0 / 3.0) - (1.0 - v)) / math.sqrt(v)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def uniformity_p(values: np.ndarray, length: int, bins: int) -> float:
    """p-value of the chi-square test that ``values`` are uniform on [0, length)
    (``bins`` equal-width bins; ``length`` must be a multiple of ``bins``)."""
    assert length % bins == 0
    counts = np.bincount(values // (length // bins), minlength=bins)
    expected = len(values) / bins
    return chi2_sf(float(((counts - expected) ** 2 / expected).sum()), bins - 1)


def independence_p(a: np.ndarray, b: np.ndarray, length: int, bins: int) -> float:
    """p-value of the chi-square test that the pairs (a[k], b[k]) are uniform on the
    ``bins x bins`` grid over [0, length)^2, i.e. a and b independent and uniform."""
    assert length % bins == 0
    width = length // bins
    cells = np.bincount((a // width) * bins + (b // width), minlength=bins * bins)
    expected = len(a) / (bins * bins)
    return chi2_sf(float(((cells - expected) ** 2 / expected).sum()), bins * bins - 1)


ALPHA = 1e-6  # a correct generator fails one of these tests once in 10^5 runs


def test_chi2_sf_matches_known_quantiles():
    # Upper quantiles of chi-square (from tables): df=100: 0.05 -> 124.342, 0.001 -> 149.449.
    assert chi2_sf(124.342, 100) == pytest.approx(0.05, rel=0.05)
    assert chi2_sf(149.449, 100) == pytest.approx(0.001, rel=0.1)
    assert chi2_sf(999.0, 999) == pytest.approx(0.5, abs=0.02)


def test_the_statistical_helpers_reject_broken_generators():
    length, bins = 1024, 32
    counter = np.arange(50_000, dtype=np.uint64) % length  # a plain modulo counter
    # Its consecutive draws are strongly dependent: the pair test rejects it.
    assert independence_p(counter[:-1], counter[1:], length, bins) < 1e-100
    # As a "permutation" (the identity), its position and value are dependent.
    pos = np.tile(np.arange(length, dtype=np.uint64), 40)
    assert independence_p(pos, pos, length, bins) < 1e-100
    # A generator that favours the lower half by 3% fails uniformity.
    rng = np.random.default_rng(0)
    biased = np.where(
        rng.random(200_000) < 0.515,
        rng.integers(0, length // 2, 200_000),
        rng.integers(length // 2, length, 200_000),
    )
    assert uniformity_p(biased.astype(np.uint64), length, bins) < ALPHA
    # And honest uniform draws pass all three.
    good = rng.integers(0, length, 200_000).astype(np.uint64)
    assert uniformity_p(good, length, bins) > ALPHA
    assert independence_p(good[:-1], good[1:], length, bins) > ALPHA
    assert (
        independence_p(pos, rng.permuted(pos.reshape(40, -1), axis=1).ravel(), length, bins) > ALPHA
    )


# --------------------------------------------------------------------------- #
# API contract


@pytest.mark.parametrize("mode", MODES)
def test_next_returns_one_reusable_uint64_buffer(mode):
    s = Sampler(1000, 64, mode, seed=3)
    a = s.next()
    first = a.copy()
    addr = a.__array_interface__["data"][0]
    b = s.next()
    assert isinstance(a, np.ndarray) and a.dtype == np.uint64 and a.shape == (64,)
    assert a.flags.c_contiguous
    assert b.__array_interface__["data"][0] == addr
    assert np.shares_memory(a, b)
    # The earlier result was overwritten in place by the second draw.
    assert np.array_equal(a, b)
    assert not np.array_equal(first, b)
    for _ in range(3):
        assert next(s).__array_interface__["data"][0] == addr


def test_iteration_is_endless_and_returns_self():
    s = Sampler(10, 3, CYC, seed=1)
    assert iter(s) is s
    seen = 0
    for batch in s:
        assert batch.shape == (3,)
        seen += 1
        if seen == 1000:  # 333 cycles later, still drawing
            break
    assert seen == 1000


def test_public_surface_is_next_seek_iteration_and_what_the_loader_reads():
    s = Sampler(10, 2, IID)
    public = {n for n in dir(s) if not n.startswith("_")}
    assert public == {"next", "seek", "Mode", "batch_size", "config"}
    for absent in ("indices", "close", "__enter__", "__exit__"):
        assert not hasattr(s, absent)
    assert not hasattr(s, "__dict__")
    assert isinstance(s, _native.Sampler)
    assert [m.name for m in Sampler.Mode] == ["SEQUENTIAL", "IID", "CYCLIC"]
    assert repr(s) == "Sampler(length=10, batch_size=2, mode=Sampler.Mode.IID, seed=0) at step 0"


@pytest.mark.parametrize("mode", MODES)
def test_seek_then_next_equals_the_kth_draw(mode):
    s = Sampler(1009, 16, mode, seed=7)
    history = draw(s, 200)
    for k in [0, 1, 62, 63, 64, 65, 126, 198, 150, 3]:
        s.seek(k)
        assert np.array_equal(s.next(), history[k])
        assert np.array_equal(s.next(), history[k + 1])
    s.seek(5)
    s.seek(5)
    assert np.array_equal(s.next(), history[5])


@pytest.mark.parametrize("mode", MODES)
def test_far_seek_matches_reference(mode):
    length, b, seed = 1_000_003, 32, 99
    s = Sampler(length, b, mode, seed=seed)
    for step in [10**9, 2**40 + 17, 2**63 + 5, U64_MAX]:
        s.seek(step)
        assert s.next().tolist() == ref.batch(mode.name, length, b, seed, step)


def test_last_step_then_overflow():
    s = Sampler(100, 10, IID, seed=1)
    s.seek(U64_MAX)
    last = s.next().tolist()
    assert last == ref.batch("IID", 100, 10, 1, U64_MAX)
    with pytest.raises(OverflowError, match="last step"):
        s.next()
    s.seek(0)
    s.next()


def test_numpy_integers_are_accepted():
    s = Sampler(np.int64(100), np.uint32(10), CYC, seed=np.uint64(U64_MAX))
    s.seek(np.int16(3))
    assert s.next().tolist() == ref.batch("CYCLIC", 100, 10, U64_MAX, 3)


def test_config_identifies_the_sequence():
    s = Sampler(1000, 10, CYC, seed=2**64 - 1)
    s.next()
    assert s.config() == (1000, 10, "CYCLIC", 2**64 - 1)
    assert Sampler(1000, 10, IID).config() == (1000, 10, "IID", 0)


def test_batch_size_is_readable_before_and_after_draws():
    s = Sampler(1000, 24, IID, seed=5)
    assert s.batch_size == 24
    s.next()
    s.seek(7)
    assert s.batch_size == 24
    assert Sampler(3, 3, CYC).batch_size == 3


def test_the_loader_protocols_name_no_underscore_member():
    import types

    from loaderx import protocols

    named: dict[str, set[str]] = {}
    for name in protocols.__all__:
        proto = getattr(protocols, name)
        if isinstance(proto, type):
            named[name] = {
                m
                for m, v in vars(proto).items()
                if isinstance(v, (types.FunctionType, property)) and not m.startswith("__")
            }
    assert named == {
        "ConfiguredSampler": {"config"},
        "IndexSampler": {"next"},
        "PackedSampler": {"pack_offsets", "packs_per_step"},
        "PrefetchingReader": {"prefetch"},
        "Reader": {"gather"},
        "SeekableSampler": {"seek"},
        "SizedSampler": {"batch_size"},
    }
    assert isinstance(Sampler(10, 2, IID), protocols.SizedSampler)
    assert isinstance(Sampler(10, 2, IID), protocols.ConfiguredSampler)


def test_pickle_and_copy_resume_at_the_same_step():
    import copy

    s = Sampler(500, 7, CYC, seed=11)
    s.next()
    s.next()
    for clone in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert type(clone) is Sampler
        assert repr(clone) == repr(s)
        a = clone.next()
        assert not np.shares_memory(a, s.next())
        s.seek(2)
        assert np.array_equal(a, s.next())
        s.seek(2)
    s.seek(U64_MAX)
    s.next()
    done = pickle.loads(pickle.dumps(s))
    with pytest.raises(OverflowError):
        done.next()


# --------------------------------------------------------------------------- #
# Argument validation: type and message


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        (dict(length=0), ValueError, r"length must be an integer in \[1, 2\*\*64 - 1\], got 0"),
        (dict(length=-5), ValueError, r"length .* got -5"),
        (dict(length=2**64), ValueError, r"length .* got 18446744073709551616"),
        (dict(length=10.0), TypeError, r"length must be an integer, got float"),
        (dict(length=True), TypeError, r"length must be an integer, not bool"),
        (dict(length="10"), TypeError, r"length must be an integer, got str"),
        (dict(length=None), TypeError, r"length must be an integer, got NoneType"),
        (dict(length=np.float64(3)), TypeError, r"length must be an integer, got float64"),
        (dict(batch_size=0), ValueError, r"batch_size must be an integer in \[1, "),
        (dict(batch_size=2.0), TypeError, r"batch_size must be an integer, got float"),
        (dict(batch_size=False), TypeError, r"batch_size must be an integer, not bool"),
        (dict(seed=-1), ValueError, r"seed must be an integer in \[0, 2\*\*64 - 1\], got -1"),
        (dict(seed=2**64), ValueError, r"seed .* got 18446744073709551616"),
        (dict(seed=1.5), TypeError, r"seed must be an integer, got float"),
        (dict(seed=True), TypeError, r"seed must be an integer, not bool"),
        (dict(seed=None), TypeError, r"seed must be an integer, got NoneType"),
        (dict(mode=1), TypeError, r"mode must be a Sampler.Mode .*got 1"),
        (dict(mode="IID"), TypeError, r"mode must be a Sampler.Mode .*got 'IID'"),
        (dict(mode=None), TypeError, r"mode must be a Sampler.Mode"),
        (
            dict(mode=CYC, length=10, batch_size=11),
            ValueError,
            r"batch_size \(11\) must not exceed length \(10\) in CYCLIC mode",
        ),
    ],
)
def test_constructor_validation(kwargs, exc, pattern):
    args = dict(length=100, batch_size=10, mode=IID, seed=0) | kwargs
    with pytest.raises(exc, match=pattern):
        Sampler(**args)


def test_batch_larger_than_length_is_allowed_outside_cyclic():
    assert Sampler(3, 7, SEQ).next().tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert set(Sampler(3, 700, IID).next().tolist()) == {0, 1, 2}
    assert Sampler(1, 1, CYC).next().tolist() == [0]


@pytest.mark.parametrize(
    ("step", "exc", "pattern"),
    [
        (-1, ValueError, r"step must be an integer in \[0, 2\*\*64 - 1\], got -1"),
        (2**64, ValueError, r"step .* got 18446744073709551616"),
        (1.0, TypeError, r"step must be an integer, got float"),
        (True, TypeError, r"step must be an integer, not bool"),
        ("3", TypeError, r"step must be an integer, got str"),
    ],
)
def test_seek_validation(step, exc, pattern):
    s = Sampler(100, 10, SEQ)
    s.next()
    with pytest.raises(exc, match=pattern):
        s.seek(step)
    assert s.next().tolist() == list(range(10, 20))  # a failed seek changes nothing


def test_native_class_rejects_bad_mode_codes():
    with pytest.raises(ValueError, match="mode code must be 0, 1 or 2, got 3"):
        _native.Sampler(10, 2, 3, 0)
    with pytest.raises(TypeError, match="mode must be an integer"):
        _native.Sampler(10, 2, 1.0, 0)


# --------------------------------------------------------------------------- #
# Exact values: the native kernels against the pure-Python reference


def test_sequential_values():
    s = Sampler(10, 4, SEQ)
    assert draw(s, 4).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5]]
    huge = Sampler(U64_MAX, 3, SEQ)
    huge.seek(U64_MAX)
    first = (U64_MAX * 3) % U64_MAX
    assert huge.next().tolist() == [(first + i) % U64_MAX for i in range(3)]


def test_iid_is_one_stream_split_into_batches():
    long = Sampler(10**6, 12, IID, seed=5)
    short = Sampler(10**6, 4, IID, seed=5)
    assert draw(long, 3).ravel().tolist() == draw(short, 9).ravel().tolist()


lengths = st.one_of(
    st.integers(1, 300),
    st.integers(1, 2**20),
    st.sampled_from([2**32 - 1, 2**32, 2**32 + 1, 2**40 + 3, 2**63 - 1, 2**63, U64_MAX]),
    st.integers(1, U64_MAX),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(MODES),
    length=lengths,
    batch_size=st.integers(1, 200),
    seed=st.integers(0, U64_MAX),
    step=st.one_of(st.integers(0, 1000), st.integers(0, U64_MAX)),
)
def test_native_matches_reference_bit_for_bit(mode, length, batch_size, seed, step):
    if mode is CYC and batch_size > length:
        batch_size = length
    s = Sampler(length, batch_size, mode, seed=seed)
    s.seek(step)
    assert s.next().tolist() == ref.batch(mode.name, length, batch_size, seed, step)


@pytest.mark.parametrize("mode", MODES)
def test_large_batches_release_the_gil_and_stay_exact(mode):
    # From 65536 indices the fill runs with the GIL released; results are unchanged.
    length, b = 10**6 + 3, 70_000
    s = Sampler(length, b, mode, seed=8)
    s.seek(20)
    got = s.next().copy()
    if mode is CYC:
        per_cycle = length // b
        c, j = divmod(20, per_cycle)
        for i in range(0, b, 997):
            assert got[i] == ref.permute(length, 8, c, j * b + i)
    else:
        assert got.tolist() == ref.batch(mode.name, length, b, 8, 20)

    results = {}

    def worker(k):
        t = Sampler(length, b, mode, seed=8)
        t.seek(20)
        for _ in range(3):
            results[k] = t.next().copy()
            t.seek(20)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert np.array_equal(results[k], got)


def test_identical_in_a_fresh_process():
    code = (
        "from loaderx.sampler import Sampler\n"
        "for m in Sampler.Mode:\n"
        "    s = Sampler(1_000_003, 16, m, seed=2**63 + 1)\n"
        "    s.seek(12345)\n"
        "    print(s.next().tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    for m, line in zip(MODES, lines, strict=True):
        assert line == str(ref.batch(m.name, 1_000_003, 16, 2**63 + 1, 12345))


# --------------------------------------------------------------------------- #
# CYCLIC: permutations without replacement


PERMUTATION_CASES = [
    (1, 1),
    (2, 1),
    (2, 2),
    (3, 2),
    (4, 4),
    (5, 2),
    (7, 3),
    (13, 13),
    (16, 5),
    (17, 4),
    (64, 8),
    (97, 10),
    (1024, 1),
    (1024, 100),
    (4099, 64),
    (65_536, 256),
    (65_537, 4096),
    (999_983, 1024),
    (1_000_003, 4096),
]


@pytest.mark.parametrize(("length", "b"), PERMUTATION_CASES)
def test_each_cycle_is_a_permutation_minus_its_remainder(length, b):
    per_cycle = length // b
    for cycle in (0, 1, 1234):
        values = cycle_values(length, b, seed=21, cycle=cycle)
        assert len(values) == per_cycle * b
        assert values.max() < length
        seen = np.bincount(values.astype(np.int64), minlength=length)
        assert seen.max() == 1  # distinct within the cycle
        missing = np.flatnonzero(seen == 0)
        omitted = [ref.permute(length, 21, cycle, p) for p in range(per_cycle * b, length)]
        assert sorted(omitted) == missing.tolist()


def test_remainders_differ_between_cycles():
    length, b = 10_007, 100  # 7 omitted per cycle
    omitted = set()
    for cycle in range(6):
        values = cycle_values(length, b, seed=4, cycle=cycle)
        missing = frozenset(set(range(length)) - set(values.tolist()))
        assert len(missing) == 7
        omitted.add(missing)
    assert len(omitted) == 6


@pytest.mark.parametrize("length", [10, 100, 1000, 65_536, 1_000_003])
def test_consecutive_cycles_differ(length):
    b = min(length, 64)
    previous = None
    for cycle in range(4):
        values = cycle_values(length, b, seed=0, cycle=cycle)
        if previous is not None:
            assert not np.array_equal(values, previous)
        previous = values


def test_seeds_give_different_permutations():
    a = cycle_values(1000, 10, seed=1, cycle=0)
    b = cycle_values(1000, 10, seed=2, cycle=0)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize(
    "length", [2**40 - 1, 2**40, 2**40 + 1, 2**63 - 1, 2**63, 2**63 + 1, U64_MAX]
)
def test_huge_lengths_stay_in_range_and_distinct(length):
    b, steps = 4096, 64
    s = Sampler(length, b, CYC, seed=length % 1000)
    s.seek(5 * (length // b) - 2)  # the last two batches of cycle 4, then cycle 5
    block = draw(s, 3)
    assert (block < np.uint64(length)).all()
    assert len(np.unique(block[:2])) == 2 * b
    s.seek(0)
    many = draw(s, steps).ravel()
    assert (many < np.uint64(length)).all()
    assert len(np.unique(many)) == steps * b
    # The spread covers the whole range, not a corner of it.
    assert many.max() > length * 0.99 and many.min() < length * 0.01
    for mode in (SEQ, IID):
        t = Sampler(length, b, mode, seed=1)
        t.seek(U64_MAX)
        assert (t.next() < np.uint64(length)).all()


# --------------------------------------------------------------------------- #
# Statistical quality


def test_iid_values_are_uniform_and_pairwise_independent():
    length, bins = 1 << 20, 256
    s = Sampler(length, 4096, IID, seed=12345)
    values = draw(s, 50).ravel()
    assert uniformity_p(values, length, bins) > ALPHA
    assert independence_p(values[:-1], values[1:], length, 32) > ALPHA


def test_iid_first_draw_is_uniform_over_seeds():
    # Seeds 0, 1, 2, ... are the worst case for a weak key derivation.
    length, bins = 3000, 100
    firsts = np.array([Sampler(length, 2, IID, seed=seed).next().copy() for seed in range(20_000)])
    assert uniformity_p(firsts[:, 0], length, bins) > ALPHA
    assert independence_p(firsts[:, 0], firsts[:, 1], length, 10) > ALPHA


def test_iid_is_uniform_for_a_length_that_is_not_a_power_of_two():
    length, bins = 999_999, 333
    values = draw(Sampler(length, 4096, IID, seed=3), 40).ravel()
    assert uniformity_p(values, length, bins) > ALPHA


@pytest.mark.parametrize(("length", "b"), [(64, 8), (50, 5), (1000, 40), (4096, 64)])
def test_cyclic_position_and_value_are_independent_over_seeds(length, b):
    # Over many seeds, position p of a cycle must be equally likely to hold any value.
    bins = {64: 64, 50: 50, 1000: 40, 4096: 64}[length]
    seeds = 1500 if length <= 64 else 300
    pos = np.tile(np.arange(length // b * b, dtype=np.uint64), seeds)
    vals = np.concatenate([cycle_values(length, b, seed=seed, cycle=3) for seed in range(seeds)])
    assert independence_p(pos, vals, length, bins) > ALPHA
    # Also between cycles of one seed: cycle c's value at p vs cycle c+1's.
    nxt = np.concatenate([cycle_values(length, b, seed=seed, cycle=4) for seed in range(seeds)])
    assert independence_p(vals, nxt, length, bins) > ALPHA


def test_cyclic_consecutive_values_within_a_cycle_are_independent():
    length, b, bins = 1 << 16, 256, 64
    values = np.concatenate([cycle_values(length, b, seed=s, cycle=0) for s in range(4)])
    assert independence_p(values[:-1], values[1:], length, bins) > ALPHA
