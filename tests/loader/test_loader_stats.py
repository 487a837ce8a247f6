"""Loader.stats(): stage times against injected delays, the input-bound fraction,
queue occupancy, bytes, windows, periodic reports and their one-line summary."""

import json
import math
import time

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS

from loaderx.dataloader import Loader, format_stats
from loaderx.dataloader._stats import (
    EVERY_STEP,
    SAMPLE,
    SAMPLED_COST_NS,
    _buckets,
    _middle,
    _percentile,
    _threshold,
)
from loaderx.errors import InvalidArgumentError
from loaderx.sampler import Sampler
from loaderx.zrecord import Cache, Dense, Ragged, RaggedBatch

SEQ = Sampler.Mode.SEQUENTIAL


@pytest.fixture
def store(tmp_path):
    data = np.arange(4096 * 16, dtype=np.uint8).reshape(4096, 16)
    with Dense.create(tmp_path / "s", np.uint8, (16,), codec="raw") as w:
        w.append(data)
    return Dense.open(tmp_path / "s")


class SlowReader:
    """A custom reader whose gather sleeps a fixed time."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __len__(self):
        return 1000

    def gather(self, positions):
        time.sleep(self.seconds)
        return np.asarray(positions).copy()


def sleeping(seconds):
    def transform(shards):
        time.sleep(seconds)
        return shards

    return transform


def close_to(value, expected, rel=1.0):
    """At least what was injected, less the histogram's resolution (1/32), and at
    most twice it (a loaded machine oversleeps)."""
    return expected * (1 - 1 / 32) <= value <= expected * (1 + rel) + 0.002


# -- the histogram ---------------------------------------------------------------


def _bucket(ns):
    """The bucket of one duration, written out: exact below 16 ns, then 16
    buckets of equal width per octave."""
    if ns < 16:
        return ns
    bits = ns.bit_length()
    return (bits - 4) * 16 + ((ns >> (bits - 5)) & 15)


def test_buckets_are_exact_below_16_ns_and_within_a_32nd_above():
    for ns in range(16):
        assert _middle(_bucket(ns)) == ns
    rng = np.random.default_rng(0)
    for ns in [16, 17, 31, 32, 33, 1000, 10**6, 10**9, 2**62, *rng.integers(16, 2**40, 500)]:
        ns = int(ns)
        mid = _middle(_bucket(ns))
        assert abs(mid - ns) <= ns / 32, ns
    # Buckets increase with the duration and stay within the histogram.
    edges = [_bucket(2**k) for k in range(63)]
    assert edges == sorted(edges) and len(set(edges)) == 63
    assert _bucket(2**63 - 1) == 60 * 16 - 1


def test_the_bulk_buckets_equal_the_scalar_ones():
    rng = np.random.default_rng(1)
    ns = np.concatenate(
        [
            np.arange(0, 5000),
            rng.integers(0, 2**63 - 1, 5000, dtype=np.int64),
            2 ** np.arange(63, dtype=np.int64),
            2 ** np.arange(1, 63, dtype=np.int64) - 1,
        ]
    )
    assert _buckets(ns).tolist() == [_bucket(int(v)) for v in ns]


def test_percentiles_are_the_nearest_rank():
    counts = np.zeros(60 * 16, np.int64)
    counts[_bucket(10)] = 50
    counts[_bucket(12)] = 45
    counts[_bucket(15)] = 5
    assert _percentile(counts, 100, 50) == 10e-9
    assert _percentile(counts, 100, 95) == 12e-9
    assert _percentile(counts, 100, 96) == 15e-9
    assert _percentile(counts, 0, 50) == 0.0


# -- stage times -----------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_slow_transform_is_the_transform_stage(store, workers):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, transform=sleeping(0.02), workers=workers) as loader:
        for _ in range(12):
            loader.next()
        st = loader.stats()
    assert st["steps"] == 12
    assert list(st["stages"]) == ["draw", "gather", "transform"]
    t = st["stages"]["transform"]
    assert close_to(t["p50_s"], 0.02) and 0.0193 <= t["p95_s"] < 0.25
    assert close_to(t["total_s"], 12 * 0.02)
    assert st["stages"]["gather"]["p50_s"] < 0.005
    assert st["stages"]["draw"]["p50_s"] < 0.005


def test_a_slow_reader_is_the_gather_stage():
    with Loader({"x": [SlowReader(0.015)]}, Sampler(1000, 10, SEQ), workers=1) as loader:
        for _ in range(10):
            loader.next()
        st = loader.stats()
    assert list(st["stages"]) == ["draw", "gather"]
    assert close_to(st["stages"]["gather"]["p50_s"], 0.015)
    # With nothing else to do, the consumer waits for the reader.
    assert st["input_bound"] > 0.7


def test_a_remote_reader_behind_latency_waits_in_fetch_wait(tmp_path, range_server, fault_proxy):
    data = [np.full(40 + i % 7, i, np.int32) for i in range(512)]
    with Ragged.create(tmp_path / "s", np.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(data))
    fault_proxy.latency_ms = 40
    r = Ragged.open(fault_proxy.url + "/s", storage_options=HTTP_STORAGE_OPTIONS)
    with Loader({"t": [r]}, Sampler(len(r), 32, SEQ), workers=1, prefetch=1) as loader:
        for _ in range(6):
            loader.next()
        st = loader.stats()
    assert list(st["stages"]) == ["draw", "gather", "fetch_wait"]
    # The reads wait round trips (the first at least one; later steps may find
    # their blocks already read); beginning them does not.
    assert st["stages"]["fetch_wait"]["p95_s"] >= 0.03
    assert st["stages"]["fetch_wait"]["total_s"] >= 0.03
    assert st["stages"]["gather"]["p95_s"] < 0.02
    assert st["bytes_gathered"] == sum(len(d) * 4 for d in data[: 6 * 32])


def test_bytes_fetched_and_read_from_the_cache_are_the_stores_traffic(tmp_path, range_server):
    data = np.arange(2000 * 1024, dtype=np.uint32).astype(np.uint8).reshape(2000, 1024)
    with Dense.create(tmp_path / "s", np.uint8, (1024,), codec="raw") as w:
        w.append(data)
    url, cache = range_server.url + "/s", Cache(tmp_path / "cache", block_bytes=64 * 1024)

    def run(reader):
        # No workers, and no read-ahead: nothing is fetched ahead of the steps
        # delivered.
        s = Sampler(len(reader), 64, Sampler.Mode.IID, seed=3)
        with Loader({"x": [reader, reader]}, s, workers=0) as loader:
            for _ in range(10):
                loader.next()
            return loader.stats()

    options = {**HTTP_STORAGE_OPTIONS, "read_ahead_bytes": 0}
    cold = Dense.open(url, storage_options=options, cache=cache)
    range_server.reset_counts()
    st = run(cold)
    assert st["bytes_fetched"] == range_server.body_bytes() > st["bytes_gathered"] == 10 * 64 * 1024
    # Later steps find some of the blocks earlier ones fetched.
    assert 0 <= st["bytes_from_cache"] < st["bytes_gathered"]
    assert cold.traffic().fetched >= st["bytes_fetched"]
    warm = Dense.open(url, storage_options=options, cache=cache)
    range_server.reset_counts()
    st = run(warm)
    assert st["bytes_fetched"] == range_server.body_bytes() == 0
    assert st["bytes_from_cache"] >= st["bytes_gathered"] == 10 * 64 * 1024
    assert "fetched" in format_stats(st) and "from the cache" in format_stats(st)


def test_a_local_store_fetches_nothing(store):
    with Loader({"x": [store]}, Sampler(len(store), 64, SEQ), workers=1) as loader:
        loader.next()
        st = loader.stats()
    assert (st["bytes_fetched"], st["bytes_from_cache"]) == (0, 0)
    assert tuple(store.traffic()) == (0, 0)


# -- the consumer's side -----------------------------------------------------------


def test_input_bound_is_near_one_for_a_consumer_that_does_nothing(store):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, transform=sleeping(0.01), workers=1, prefetch=2) as loader:
        for _ in range(20):
            loader.next()
        st = loader.stats()
    assert st["input_bound"] > 0.75
    assert st["queue"]["empty"] > 0.8
    assert close_to(st["wait"]["p50_s"], 0.01)


def test_input_bound_is_near_zero_for_a_consumer_slower_than_the_step(store):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, transform=sleeping(0.002), workers=2, prefetch=3) as loader:
        loader.next()
        time.sleep(0.1)  # the queue fills
        loader.reset_stats()
        for _ in range(10):
            loader.next()
            time.sleep(0.02)
        st = loader.stats()
    assert st["steps"] == 10
    assert st["input_bound"] < 0.2
    q = st["queue"]
    assert q["capacity"] == 5
    assert q["empty"] == 0.0
    assert 3 <= q["mean"] <= 5 and 3 <= q["max"] <= 5


@pytest.mark.parametrize(("workers", "prefetch"), [(1, 1), (2, 3)])
def test_a_loader_always_ahead_fills_its_queue_without_a_transform(store, workers, prefetch):
    # Without a transform the consumer begins the steps ahead itself; it began
    # the step freed by the one it took only at its next call, so a loader
    # always ahead showed at most capacity - 1 steps ready.
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, workers=workers, prefetch=prefetch) as loader:
        for _ in range(30):
            loader.next()
            time.sleep(0.01)
        st = loader.stats()
    q = st["queue"]
    assert q["capacity"] == workers + prefetch
    assert q["max"] == workers + prefetch
    assert q["mean"] > workers + prefetch - 0.5


@pytest.mark.parametrize("workers", [0, 1])
def test_the_wait_of_a_next_that_raises_counts(store, workers):
    # input_bound is the share of the time spent inside next(): a next() that
    # raised after waiting 0.3 s for its step was left out of the wait.
    def transform(shards, step):
        time.sleep(0.3)
        if step.step == 1:
            raise KeyError("bad record")
        return shards

    s = Sampler(len(store), 8, SEQ)
    with Loader({"x": [store]}, s, transform=transform, workers=workers) as loader:
        loader.next()
        with pytest.raises(KeyError):
            loader.next()
        st = loader.stats()
    assert st["steps"] == 1
    assert st["wait"]["total_s"] > 0.55
    assert st["input_bound"] > 0.9


def test_time_to_first_batch_counts_from_the_first_next(store):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, transform=sleeping(0.05), workers=0) as loader:
        assert loader.stats()["time_to_first_batch_s"] is None
        time.sleep(0.1)  # before the first next(): not counted
        loader.next()
        first = loader.stats()["time_to_first_batch_s"]
        loader.reset_stats()
        assert loader.stats()["time_to_first_batch_s"] == first
    assert 0.05 <= first < 0.15


def test_bytes_gathered_are_the_payload_bytes(store):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store, store], "y": [store, store]}, s, workers=0) as loader:
        for _ in range(3):
            loader.next()
        assert loader.stats()["bytes_gathered"] == 3 * 2 * 64 * 16


def test_reset_starts_a_new_window(store):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, workers=1) as loader:
        for _ in range(5):
            loader.next()
        assert loader.stats()["steps"] == 5
        loader.reset_stats()
        empty = loader.stats()
        assert empty["steps"] == 0 and empty["bytes_gathered"] == 0
        assert empty["stages"]["gather"] == {"total_s": 0.0, "p50_s": 0.0, "p95_s": 0.0}
        for _ in range(3):
            loader.next()
        assert loader.stats()["steps"] == 3
        assert iter(loader).stats()["steps"] == 3


def test_stats_are_plain_json(store):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, transform=sleeping(0), workers=2) as loader:
        for _ in range(4):
            loader.next()
        st = loader.stats()
    assert json.loads(json.dumps(st)) == st
    assert set(st) == {
        "steps",
        "elapsed_s",
        "time_to_first_batch_s",
        "input_bound",
        "wait",
        "stages",
        "queue",
        "bytes_gathered",
        "bytes_fetched",
        "bytes_from_cache",
    }


def test_a_loader_never_started_has_empty_stats(store):
    with Loader({"x": [store]}, Sampler(len(store), 8, SEQ)) as loader:
        st = loader.stats()
    assert st["steps"] == 0 and st["elapsed_s"] == 0.0 and st["input_bound"] == 0.0
    assert st["queue"] == {"capacity": 8, "mean": 0.0, "max": 0, "empty": 0.0}


# -- periodic reports ---------------------------------------------------------------


def test_reports_arrive_at_the_period(store):
    reports = []
    s = Sampler(len(store), 64, SEQ)
    with Loader(
        {"x": [store]},
        s,
        transform=sleeping(0.005),
        workers=1,
        stats_every=0.2,
        on_stats=reports.append,
    ) as loader:
        start = time.monotonic()
        steps = 0
        while time.monotonic() - start < 1.1:
            loader.next()
            steps += 1
    assert 4 <= len(reports) <= 6
    for r in reports:
        assert 0.2 <= r["elapsed_s"] < 0.35
        assert r["steps"] > 0
    # Each report covers the period since the one before: none is counted twice.
    assert sum(r["steps"] for r in reports) <= steps
    assert steps - sum(r["steps"] for r in reports) <= 0.2 / 0.005 + 2


@pytest.mark.parametrize("workers", [0, 2])
def test_a_report_that_raises_loses_no_batch(store, workers):
    # The callback ran after the step was counted as delivered, and its
    # exception replaced the step's batch, which no call returned.
    calls = []

    def report(stats):
        calls.append(stats["steps"])
        if len(calls) == 1:
            raise KeyError("logging backend down")

    got = []
    with Loader(
        {"x": [store]},
        Sampler(4096, 4, mode=SEQ),
        workers=workers,
        stats_every=1e-9,
        on_stats=report,
    ) as ld:
        with pytest.raises(KeyError, match="logging backend down"):
            while True:
                got.append(np.from_dlpack(next(ld)[0]["x"])[:, 0].tolist())
        # The report's step was returned; the error came at the call after it.
        assert len(got) == 1
        got.extend(np.from_dlpack(next(ld)[0]["x"])[:, 0].tolist() for _ in range(3))
        assert ld.state_dict()["step"] == 4
    assert got == [[16 * (4 * k + i) % 256 for i in range(4)] for k in range(4)]


def test_the_default_report_is_one_line_on_stderr(store, capsys):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, workers=0, stats_every=0.05) as loader:
        loader.next()
        time.sleep(0.06)
        loader.next()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("loaderx: input-bound ")
    assert "2 steps" in err and "gathered" in err


def test_format_stats_reads_a_stats_dict():
    zero = {"total_s": 0.0, "p50_s": 0.0, "p95_s": 0.0}
    st = {
        "steps": 1200,
        "elapsed_s": 10.0,
        "time_to_first_batch_s": 0.5,
        "input_bound": 0.034,
        "wait": {"total_s": 0.34, "p50_s": 0.0005, "p95_s": 0.001},
        "stages": {
            "draw": {"total_s": 0.0, "p50_s": 2.1e-6, "p95_s": 3e-6},
            "gather": {"total_s": 0.05, "p50_s": 41e-6, "p95_s": 60e-6},
            "transform": {"total_s": 1.4, "p50_s": 1.2e-3, "p95_s": 2e-3},
            "fetch_wait": zero,
        },
        "queue": {"capacity": 4, "mean": 3.2, "max": 4, "empty": 0.01},
        "bytes_gathered": 1_250_000_000,
        "bytes_fetched": 0,
        "bytes_from_cache": 0,
    }
    assert format_stats(st) == (
        "input-bound 3%: 1200 steps, 120/s; p50 draw 2.1 µs, gather 41 µs, "
        "transform 1.2 ms, fetch_wait 0 ns; wait 500 µs p50; queue 3.2 of 4; 1.25 GB gathered"
    )


# 1e300 raised OverflowError turning it into nanoseconds.
@pytest.mark.parametrize("every", [0, -1, math.nan, math.inf, True, "1", 1e300, 10**9 + 1])
def test_bad_periods_are_refused(store, every):
    with pytest.raises(InvalidArgumentError, match="stats_every must be a positive number"):
        Loader({"x": [store]}, Sampler(len(store), 8, SEQ), stats_every=every)


def test_a_period_of_a_billion_seconds_is_taken(store):
    with Loader({"x": [store]}, Sampler(len(store), 8, SEQ), stats_every=1e9) as ld:
        next(ld)


def test_a_callback_needs_a_period_and_must_be_callable(store):
    s = Sampler(len(store), 8, SEQ)
    with pytest.raises(InvalidArgumentError, match="give both"):
        Loader({"x": [store]}, s, on_stats=print)
    with pytest.raises(TypeError, match="on_stats must be callable, got int"):
        Loader({"x": [store]}, s, stats_every=1, on_stats=3)


# -- sampling ------------------------------------------------------------------------


def test_each_threshold_samples_exactly_its_share_of_every_4096_steps():
    assert len(SAMPLE) == 4096
    for t in (1, 2, 4, 16, 64, 255, EVERY_STEP):
        assert sum(v < t for v in SAMPLE) == 16 * t


@pytest.mark.parametrize("t", [4, 16, 64])
def test_sampled_steps_have_no_short_period(t):
    # A training loop of period p (gradient accumulation, an evaluation every p
    # steps) must not line up with the sampled steps: every phase is sampled,
    # none much more than the others.
    sampled = [s for s in range(4096) if SAMPLE[s] < t]
    for p in range(2, 17):
        if len(sampled) < 8 * p:
            continue
        counts = np.bincount(np.array(sampled) % p, minlength=p)
        assert counts.min() > 0 and counts.max() <= 2 * len(sampled) / p, p


def test_the_sampling_rate_keeps_measuring_under_a_quarter_percent():
    assert _threshold(1.2e6) == EVERY_STEP  # 1.2 ms steps: every step
    assert _threshold(1e6) == 128
    assert _threshold(200e3) == 32
    assert _threshold(23e3) == 4  # the fewest: one step in 64
    assert _threshold(1e3) == 4
    for period in (10e3, 23e3, 50e3, 100e3, 300e3, 1e6):
        t = _threshold(period)
        assert SAMPLED_COST_NS * t / EVERY_STEP <= 0.0025 * period or t == 4
        assert t == EVERY_STEP or SAMPLED_COST_NS * 2 * t / EVERY_STEP > 0.0025 * period


def _fast(tmp_path, kind):
    if kind == "dense":
        data = np.arange(5000 * 8, dtype=np.int32).reshape(5000, 8)
        with Dense.create(tmp_path / "f", np.int32, (8,), codec="raw") as w:
            w.append(data)
        return Dense.open(tmp_path / "f"), np.full(5000, 32)
    records = [np.full(1 + i % 13, i, np.int32) for i in range(5000)]
    with Ragged.create(tmp_path / "f", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(records))
    return Ragged.open(tmp_path / "f"), np.array([r.nbytes for r in records])


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("workers", [0, 1])
def test_fast_steps_are_sampled_and_steps_and_bytes_stay_exact(tmp_path, kind, workers):
    reader, sizes = _fast(tmp_path, kind)
    s = Sampler(len(reader), 8, Sampler.Mode.IID, seed=5)
    ref = Sampler(len(reader), 8, Sampler.Mode.IID, seed=5)
    steps = 12_000
    with Loader({"x": [reader]}, s, workers=workers) as loader:
        for _ in range(steps):
            loader.next()
        st = loader.stats()
        threshold = loader._pipeline.stats.threshold  # noqa: SLF001
    assert threshold < EVERY_STEP  # sampling set in
    want = sum(int(sizes[ref.next()].sum()) for _ in range(steps))
    assert st["steps"] == steps and st["bytes_gathered"] == want
    # The waits are every step's: with nothing else to do, the consumer spends
    # most of its time in next().
    assert 0.3 < st["input_bound"] <= 1.0
    assert st["wait"]["total_s"] <= st["elapsed_s"]
    gather = st["stages"]["gather"]
    assert 0 < gather["p50_s"] <= gather["p95_s"]
    # The gather total is estimated from about one step in 64, each standing for
    # 64: one measured step preempted on a busy machine moves it by 64 times its
    # delay, so it is held to the scale of the steps, not below the elapsed time.
    assert 0.5 * steps * gather["p50_s"] <= gather["total_s"] < 1.5 * st["elapsed_s"]
    assert st["queue"]["mean"] <= st["queue"]["capacity"]


def test_a_custom_readers_bytes_are_counted_at_every_step(tmp_path):
    class Arrays:
        def __len__(self):
            return 1000

        def gather(self, positions):
            return np.asarray(positions).astype(np.int16)

    s = Sampler(1000, 10, SEQ)
    with Loader({"x": [Arrays()]}, s, workers=0) as loader:
        for _ in range(3000):
            loader.next()
        st = loader.stats()
    assert st["steps"] == 3000 and st["bytes_gathered"] == 3000 * 10 * 2


def test_a_resumed_loader_counts_its_own_steps(store):
    s = Sampler(len(store), 64, SEQ)
    with Loader({"x": [store]}, s, workers=1) as loader:
        for _ in range(5):
            loader.next()
        state = loader.state_dict()
    with Loader({"x": [store]}, Sampler(len(store), 64, SEQ), workers=1) as loader:
        loader.load_state_dict(state)
        for _ in range(3):
            loader.next()
        st = loader.stats()
    assert st["steps"] == 3 and st["bytes_gathered"] == 3 * 64 * 16


class SpinningSampler:
    """Positions 0..7 again and again, each draw spinning `seconds` first."""

    def __init__(self, seconds):
        self.ns = int(seconds * 1e9)
        self.batch = np.arange(8, dtype=np.uint64)

    def next(self):
        end = time.perf_counter_ns() + self.ns
        while time.perf_counter_ns() < end:
            pass
        return self.batch


@pytest.mark.parametrize("workers", [0, 1])
def test_a_sampled_stage_stands_for_the_steps_between(tmp_path, workers):
    reader, _ = _fast(tmp_path, "dense")
    steps = 8000
    with Loader({"x": [reader]}, SpinningSampler(40e-6), workers=workers) as loader:
        for _ in range(steps):
            loader.next()
        st = loader.stats()
        threshold = loader._pipeline.stats.threshold  # noqa: SLF001
    assert threshold <= 32  # one step in 8 or fewer sampled, after the first 1024
    draw = st["stages"]["draw"]
    # Unweighted, the sampled draws would add up to a third of this or less.
    assert 0.7 * steps * 40e-6 <= draw["total_s"] <= 2.5 * steps * 40e-6
    assert close_to(draw["p50_s"], 40e-6, rel=1.5)
