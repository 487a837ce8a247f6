"""The WindowedSampler: every record once per pass, windows read one at a time,
seek equal to replay, exact values against the pure-Python reference, the
Sampler's contract (buffer, iteration, pickling, config, last step) and its
argument errors."""

from __future__ import annotations

import copy
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest
import windowed_reference as ref
from hypothesis import given, settings
from hypothesis import strategies as st

from loaderx import _native, protocols
from loaderx.sampler import WindowedSampler
from loaderx.zrecord import Dense

U64_MAX = 2**64 - 1
MiB = 2**20


def windowed(length, data_bytes, batch_size, window_bytes, block_bytes, seed=0, index_bytes=0):
    return WindowedSampler.from_sizes(
        length,
        data_bytes,
        batch_size,
        seed=seed,
        window_bytes=window_bytes,
        block_bytes=block_bytes,
        index_bytes=index_bytes,
    )


def draws(s: WindowedSampler, count: int) -> np.ndarray:
    """The next ``count`` draws, batch after batch, as one flat copy (the last
    batch cut to fit)."""
    b = s.batch_size
    out = np.concatenate([s.next().copy() for _ in range(-(-count // b))])
    return out[:count]


# (length, data_bytes, block_bytes, window_bytes): records per group, window and
# windows per pass of every size, none a multiple of the others.
GEOMETRIES = [
    (1, 10, 4, 4),
    (2, 0, 4, 4),
    (7, 70, 10, 20),
    (97, 9700, 300, 1000),
    (1000, 100_000, 1000, 3500),
    (1009, 50_450, 200, 700),
    (4099, 409_900, 1000, 64_000),
    (10_007, 10_007 * 48, 4096, 40_000),
    (513, 513 * 2000, 1000, 1000),  # records larger than a block: one per group
    (60, 6000, 10_000, 1 << 40),  # one window
]


@pytest.mark.parametrize(("length", "data", "block", "window_bytes"), GEOMETRIES)
@pytest.mark.parametrize("b", [1, 3, 64, 1000])
def test_every_pass_holds_every_record_exactly_once(length, data, block, window_bytes, b):
    s = windowed(length, data, b, window_bytes, block, seed=length + b)
    passes = draws(s, 3 * length).reshape(3, length)
    for p in passes:
        assert np.array_equal(np.sort(p), np.arange(length))
    if length > 3:
        assert not np.array_equal(passes[0], passes[1])


@pytest.mark.parametrize(("length", "data", "block", "window_bytes"), GEOMETRIES)
def test_each_window_is_one_run_of_a_pass_in_a_fresh_order(length, data, block, window_bytes):
    s = windowed(length, data, 5, window_bytes, block, seed=3)
    group, window, windows, last = ref.geometry(length, data, block, window_bytes)
    assert (s.window_records, s.windows) == (window, windows)
    orders = []
    for p in draws(s, 4 * length).reshape(4, length):
        w = p // window
        starts = np.flatnonzero(np.diff(w)) + 1
        runs = np.split(w, starts)
        # Each window appears once, as one run of its own size.
        assert sorted(int(r[0]) for r in runs) == list(range(windows))
        assert all(len(r) == (last if r[0] == windows - 1 else window) for r in runs)
        orders.append([int(r[0]) for r in runs])
    if windows >= 4:
        assert len({tuple(o) for o in orders}) > 1


def test_the_geometry_is_sized_from_the_bytes():
    # 10 million records of 100 bytes: groups of floor(2^20 / 100) records.
    s = windowed(10**7, 10**9, 8, 256 * MiB, MiB)
    assert (s.window_records, s.windows) == (256 * 10_485, 4)
    assert ref.geometry(10**7, 10**9, MiB, 256 * MiB) == (10_485, 2_684_160, 4, 1_947_520)


def test_the_index_counts_with_the_data():
    # A billion records of 8 bytes with 24-byte entries: groups of
    # floor(2^20 * 10^9 / (32 * 10^9)) = 32,768 records, a quarter of what the
    # data alone would give, so that a window's index blocks fit its bytes too.
    n, data, index = 10**9, 8 * 10**9, 24 * 10**9
    assert ref.geometry(n, data, MiB, 256 * MiB, index) == (32_768, 8_388_608, 120, 1_755_648)
    s = windowed(n, data, 8, 256 * MiB, MiB, index_bytes=index)
    assert (s.window_records, s.windows) == (8_388_608, 120)
    assert windowed(n, data, 8, 256 * MiB, MiB).window_records == 4 * 8_388_608
    # An index alone sizes the groups.
    assert ref.geometry(10, 0, 20, 40, 100) == (2, 4, 3, 2)
    assert (windowed(10, 0, 3, 40, 20, index_bytes=100).window_records) == 4


def test_documented_check_values():
    s = windowed(10, 100, 3, 30, 10)
    assert [s.next().tolist() for _ in range(4)] == [[7, 8, 6], [2, 1, 0], [5, 4, 3], [9, 9, 6]]
    s = windowed(10**7, 10**9, 8, 256 * MiB, MiB, seed=42)
    assert s.next().tolist() == [
        7572886,
        6107829,
        7962765,
        5926181,
        6374463,
        7414321,
        7252802,
        7736257,
    ]


def test_seek_equals_replay_at_random_steps_and_pass_boundaries():
    rnd = random.Random(7)
    for length, data, block, window_bytes in GEOMETRIES:
        for b in (1, 7, 250):
            s = windowed(length, data, b, window_bytes, block, seed=99)
            replay = [s.next().copy() for _ in range(3 * length // b + 3)]
            # Steps whose batch begins, ends or straddles a pass boundary.
            near = {(p * length) // b + d for p in (1, 2) for d in (-1, 0, 1)}
            steps = near | {rnd.randrange(len(replay)) for _ in range(5)}
            for step in sorted(x for x in steps if 0 <= x < len(replay)):
                s.seek(step)
                assert np.array_equal(s.next(), replay[step]), (length, b, step)


def test_the_reference_inverse_is_the_brute_force_place():
    for windows in (1, 2, 3, 5, 17, 100, 1000):
        for seed in range(5):
            key = ref.stream_key(seed, ref.TAG_WINDOW_ORDER, seed)
            order = [ref.permute(windows, key, t) for t in range(windows)]
            assert sorted(order) == list(range(windows))
            assert ref.unpermute(windows, key, windows - 1) == order.index(windows - 1)


sizes = st.integers(0, U64_MAX)


@settings(max_examples=300, deadline=None)
@given(
    length=st.one_of(st.integers(1, 5000), st.integers(1, U64_MAX)),
    data=sizes,
    block=st.one_of(st.integers(1, 4096), st.integers(1, U64_MAX)),
    window_bytes=st.one_of(st.integers(1, 1 << 20), st.integers(1, U64_MAX)),
    b=st.integers(1, 300),
    seed=sizes,
    step=st.one_of(st.integers(0, 1000), sizes),
    index=st.one_of(st.just(0), st.integers(0, 1 << 30), sizes),
)
def test_native_matches_reference_bit_for_bit(
    length, data, block, window_bytes, b, seed, step, index
):
    s = windowed(length, data, b, window_bytes, block, seed=seed, index_bytes=index)
    s.seek(step)
    want = ref.batch(length, data, block, window_bytes, b, seed, step, index)
    assert s.next().tolist() == want


def test_a_batch_of_2b_is_two_batches_of_b_also_with_the_gil_released():
    # 70,000 indices are filled with the GIL released.
    args = (1_000_003, 1_000_003 * 300, 70_000 * 2**14, 2**24)
    big = windowed(*args[:2], 70_000, args[3], args[2], seed=5)
    half = windowed(*args[:2], 35_000, args[3], args[2], seed=5)
    for step in (0, 13, 14, 15):
        big.seek(step)
        half.seek(2 * step)
        assert np.array_equal(big.next(), np.concatenate([half.next().copy(), half.next()]))


def test_batches_larger_than_the_store_hold_whole_passes():
    s = windowed(7, 70, 20, 20, 10, seed=1)
    flat = draws(s, 140)
    for p in flat.reshape(20, 7):
        assert sorted(p.tolist()) == list(range(7))


def test_next_returns_one_reusable_uint64_buffer():
    s = windowed(1000, 100_000, 16, 3500, 1000)
    a = s.next()
    first = a.copy()
    b = s.next()
    assert b is a and a.dtype == np.uint64 and a.shape == (16,) and a.flags.c_contiguous
    assert not np.array_equal(a, first)
    assert next(s) is a and iter(s) is s
    it = iter(s)
    assert [next(it).copy().tolist() for _ in range(2)] != []


def test_the_last_step_then_overflow():
    s = windowed(1000, 100_000, 16, 3500, 1000, seed=2)
    s.seek(U64_MAX)
    last = s.next().copy()
    assert last.tolist() == ref.batch(1000, 100_000, 1000, 3500, 16, 2, U64_MAX)
    with pytest.raises(OverflowError, match="last step"):
        s.next()
    done = pickle.loads(pickle.dumps(s))
    with pytest.raises(OverflowError):
        done.next()
    s.seek(U64_MAX)
    assert np.array_equal(s.next(), last)


def test_pickle_and_copy_resume_at_the_same_step():
    s = windowed(1000, 100_000, 7, 3500, 1000, seed=11)
    s.next()
    s.next()
    for clone in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert type(clone) is WindowedSampler
        assert repr(clone) == repr(s) and clone.config() == s.config()
        a = clone.next()
        assert not np.shares_memory(a, s.next())
        s.seek(2)
        assert np.array_equal(a, s.next())
        s.seek(2)


def test_config_repr_and_the_loader_protocols():
    s = windowed(1000, 100_000, 7, 3500, 1000, seed=11)
    assert s.config() == {
        "windowed": 1000,
        "data_bytes": 100_000,
        "index_bytes": 0,
        "block_bytes": 1000,
        "window_bytes": 3500,
        "batch_size": 7,
        "seed": 11,
    }
    assert s.batch_size == 7
    assert repr(s) == (
        "WindowedSampler(length=1000, data_bytes=100000, index_bytes=0, batch_size=7, "
        "seed=11, window_bytes=3500, block_bytes=1000) at step 0"
    )
    for proto in (
        protocols.SizedSampler,
        protocols.ConfiguredSampler,
        protocols.SeekableSampler,
        protocols.IndexSampler,
    ):
        assert isinstance(s, proto)
    assert windowed(1000, 100_000, 7, 3500, 1000, seed=12).config() != s.config()
    assert windowed(1000, 100_000, 7, 3500, 1000, seed=11, index_bytes=1).config() != s.config()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("windowed") / "x"
    with Dense.create(path, np.int64, (25,), codec="raw") as w:
        w.append(np.arange(25 * 501, dtype=np.int64).reshape(501, 25))
    reader = Dense.open(path)
    yield reader
    reader.close()


def test_a_reader_gives_its_record_count_data_bytes_and_index_bytes(store):
    s = WindowedSampler(store, 8, seed=4, window_bytes=1000)
    data = sum(store.data_file_sizes)
    assert data >= 501 * 200
    index = store.index_bytes
    assert index == os.path.getsize(os.path.join(store.path, "index.bin")) > 0
    want = windowed(
        501, data, 8, 1000, _native.DEFAULT_CACHE_BLOCK_BYTES, seed=4, index_bytes=index
    )
    assert s.config() == want.config()
    assert s.config()["block_bytes"] == 2**20
    assert np.array_equal(s.next(), want.next())
    default = WindowedSampler(store, 8)
    assert default.config()["window_bytes"] == 256 * MiB
    assert default.config()["seed"] == 0


class NotAStore:
    def __len__(self):
        return 3


class Sized:
    def __init__(self, n, sizes, index=0):
        self.n, self.data_file_sizes, self.index_bytes = n, sizes, index

    def __len__(self):
        return self.n


@pytest.mark.parametrize(
    ("reader", "kwargs", "exc", "pattern"),
    [
        (NotAStore(), {}, TypeError, r"reader must be a store reader .*got NotAStore"),
        ([1, 2], {}, TypeError, r"reader must be a store reader .*got list"),
        (Sized(0, [5]), {}, ValueError, r"reader must hold at least 1 record, it holds 0"),
        (Sized(2, [5, -1]), {}, ValueError, r"data_file_sizes must be integers >= 0"),
        (Sized(2, [2**64, 1]), {}, ValueError, r"summing to at most 2\*\*64 - 1, got \[1844"),
        (Sized(2, ["5"]), {}, TypeError, r"data_file_sizes must be integers, got \['5'\]"),
        (Sized(2, [1.5]), {}, TypeError, r"data_file_sizes must be integers, got \[1.5\]"),
        (Sized(2, [True]), {}, TypeError, r"data_file_sizes must be integers, got \[True\]"),
        (Sized(2, None), {}, TypeError, r"data_file_sizes must be integers, got None"),
        (Sized(2, [5], True), {}, TypeError, r"index_bytes must be an integer, got True"),
        (Sized(2, [5], 5.0), {}, TypeError, r"index_bytes must be an integer, got 5.0"),
        (
            Sized(2, [5], -1),
            {},
            ValueError,
            r"index_bytes must be an integer in \[0, 2\*\*64 - 1\]",
        ),
        (Sized(2, [5]), dict(batch_size=0), ValueError, r"batch_size must be an integer in \[1, "),
        (Sized(2, [5]), dict(batch_size=2.0), TypeError, r"batch_size must be an integer, got"),
        (Sized(2, [5]), dict(seed=-1), ValueError, r"seed must be an integer in \[0, "),
        (Sized(2, [5]), dict(seed=True), TypeError, r"seed must be an integer, not bool"),
        (Sized(2, [5]), dict(window_bytes=0), ValueError, r"window_bytes must be an integer in"),
        (Sized(2, [5]), dict(window_bytes=1.5), TypeError, r"window_bytes must be an integer"),
        (Sized(2, [5]), dict(window_bytes=2**64), ValueError, r"window_bytes .* got 1844"),
    ],
)
def test_bad_arguments_are_refused_naming_them(reader, kwargs, exc, pattern):
    args = dict(batch_size=4) | kwargs
    with pytest.raises(exc, match=pattern):
        WindowedSampler(reader, args.pop("batch_size"), **args)


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        (dict(length=0), ValueError, r"length must be an integer in \[1, 2\*\*64 - 1\], got 0"),
        (dict(data_bytes=-1), ValueError, r"data_bytes must be an integer in \[0, "),
        (dict(block_bytes=0), ValueError, r"block_bytes must be an integer in \[1, "),
        (dict(block_bytes=None), TypeError, r"block_bytes must be an integer, got NoneType"),
        (dict(length="3"), TypeError, r"length must be an integer, got str"),
    ],
)
def test_from_sizes_refuses_bad_sizes_naming_them(kwargs, exc, pattern):
    args = dict(length=10, data_bytes=100, batch_size=2, block_bytes=10) | kwargs
    with pytest.raises(exc, match=pattern):
        WindowedSampler.from_sizes(
            args["length"], args["data_bytes"], args["batch_size"], block_bytes=args["block_bytes"]
        )


def test_seek_validation_changes_nothing():
    s = windowed(100, 1000, 10, 100, 10)
    want = windowed(100, 1000, 10, 100, 10)
    want.next()
    s.next()
    for bad, exc in ((-1, ValueError), (2**64, ValueError), (1.0, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="step must be an integer"):
            s.seek(bad)
    assert np.array_equal(s.next(), want.next())


def test_identical_in_a_fresh_process():
    code = (
        "from loaderx.sampler import WindowedSampler as W\n"
        "s = W.from_sizes(1_000_003, 10**9, 16, seed=2**63 + 1, window_bytes=2**24,"
        " block_bytes=2**16)\n"
        "s.seek(12345)\n"
        "print(s.next().tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    want = ref.batch(1_000_003, 10**9, 2**16, 2**24, 16, 2**63 + 1, 12345)
    assert out.stdout.strip() == str(want)


def test_windows_are_cut_by_the_mean_record_size_as_documented():
    # docs/sampler.md, "Sized by the mean record": 19,900 records of 4 bytes
    # and 100 of 200,000 bytes at positions 10,000 to 10,099, Ragged (32 bytes
    # of index a record), window_bytes = 2 MiB.
    sizes = np.full(20_000, 4)
    sizes[10_000:10_100] = 200_000
    store = Sized(20_000, [int(sizes.sum())], 32 * 20_000)
    s = WindowedSampler(store, 256, window_bytes=2 * MiB)
    assert (s.window_records, s.windows) == (2_024, 10)
    spans = [
        (sizes[w : w + 2_024].sum() + 32 * len(sizes[w : w + 2_024])) / (2 * MiB)
        for w in range(0, 20_000, 2_024)
    ]
    assert round(max(spans), 1) == 9.6 and spans.index(max(spans)) == 4
    assert max(spans[:4] + spans[5:]) < 0.05
