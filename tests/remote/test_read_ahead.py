"""Read-ahead by blocks: a Loader over a remote reader with a block cache fetches
the blocks of the steps beyond those it has begun, within the store's
``read_ahead_bytes``, and stops at close; the steps' values are the local
store's. Against the counting servers of tests/support."""

from __future__ import annotations

import copy
import re
import time

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS, FaultProxy, RangeServer

from loaderx.dataloader import Loader
from loaderx.sampler import Sampler, WindowedSampler
from loaderx.zrecord import Cache, Dense, Ragged, RaggedBatch

BLOCK = 64 << 10  # the caches' block here: small, so that a small store has many
RECORD = 1000
RECORDS = 4096  # 1000 bytes each: 64 blocks of data
BATCH = 64


def quiet(server, settle: float = 0.5, most: float = 20.0) -> int:
    """The server's request count once it has not changed for `settle` seconds."""
    deadline = time.monotonic() + most
    n = server.requests()
    while time.monotonic() < deadline:
        time.sleep(settle)
        m = server.requests()
        if m == n:
            return n
        n = m
    raise AssertionError("the server never went quiet")


@pytest.fixture
def dense(tmp_path):
    values = np.random.default_rng(5).integers(0, 256, (RECORDS, RECORD), dtype=np.uint8)
    with Dense.create(tmp_path / "s", np.uint8, (RECORD,), codec="raw", data_shards=1) as w:
        w.append(values)
    return values


def open_remote(url: str, cache_dir, **options) -> Dense:
    return Dense.open(
        url,
        storage_options={**HTTP_STORAGE_OPTIONS, **options},
        cache=Cache(cache_dir, max_bytes=64 << 20, block_bytes=BLOCK),
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_the_steps_ahead_are_in_the_cache_before_they_are_begun(
    tmp_path, range_server, dense, workers
):
    reader = open_remote(range_server.url + "/s", tmp_path / "c")
    sampler = Sampler(RECORDS, BATCH, Sampler.Mode.IID, seed=3)
    check = Sampler(RECORDS, BATCH, Sampler.Mode.IID, seed=3)
    with Loader({"x": [reader]}, sampler, workers=workers, prefetch=1) as ld:
        np.testing.assert_array_equal(np.from_dlpack(next(ld)[0]["x"]), dense[check.next()])
        before = quiet(range_server)
        # The next steps need nothing more from the server: their index and data
        # blocks were fetched while the first was consumed.
        for _ in range(20):
            np.testing.assert_array_equal(np.from_dlpack(next(ld)[0]["x"]), dense[check.next()])
        assert range_server.requests() == before


def test_ragged_values_read_ahead_equal_the_local_store(tmp_path, range_server):
    rng = np.random.default_rng(9)
    rows = [rng.integers(0, 1000, int(n), dtype=np.int32) for n in rng.integers(1, 600, 2000)]
    with Ragged.create(tmp_path / "r", np.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(rows))
    local = Ragged.open(tmp_path / "r")
    remote = Ragged.open(
        range_server.url + "/r",
        storage_options=HTTP_STORAGE_OPTIONS,
        cache=Cache(tmp_path / "c", block_bytes=BLOCK),
    )
    sampler = Sampler(len(rows), 50, Sampler.Mode.IID, seed=1)
    check = Sampler(len(rows), 50, Sampler.Mode.IID, seed=1)
    with Loader({"x": [remote]}, sampler, workers=1, prefetch=1) as ld:
        next(ld)
        check.next()
        quiet(range_server)
        for _ in range(30):
            positions = check.next()
            got = [np.from_dlpack(t) for t in next(ld)[0]["x"].to_tensors()]
            want = [np.from_dlpack(t) for t in local.gather(positions).to_tensors()]
            assert len(got) == len(want) == len(positions)
            for g, w, p in zip(got, want, positions, strict=True):
                np.testing.assert_array_equal(g, w)
                np.testing.assert_array_equal(g, rows[p])


def test_the_budget_bounds_the_bytes_fetched_ahead(tmp_path, range_server, dense):
    url = range_server.url + "/s"

    def first_step(cache: str, **options) -> tuple[Dense, object, int]:
        reader = open_remote(url, tmp_path / cache, **options)
        range_server.reset_counts()
        ld = Loader({"x": [reader]}, Sampler(RECORDS, BATCH, Sampler.Mode.SEQUENTIAL), workers=0)
        next(ld)
        quiet(range_server)
        return reader, ld, range_server.body_bytes()

    _, ld, alone = first_step("off", read_ahead_bytes=0)
    ld.close()
    budget = 6 * BLOCK
    reader, ld, ahead = first_step("on", read_ahead_bytes=budget)
    # Something was read ahead, and no more than the budget, but for the steps
    # the Loader begins itself after the first (workers + prefetch = 4 of 64
    # KB, within 5 blocks): where their gathers use blocks read ahead for them,
    # the budget they free is read ahead again. Unbounded, read-ahead would take
    # the whole store (64 blocks) in its 512 steps.
    assert alone + BLOCK < ahead <= alone + budget + 5 * BLOCK, (alone, ahead)
    # Used blocks free the budget: consuming steps lets read-ahead go on, within it.
    for _ in range(10):
        next(ld)
    quiet(range_server)
    consumed = 11 * BATCH * RECORD
    assert range_server.body_bytes() > ahead
    assert range_server.body_bytes() <= consumed + 2 * BLOCK + budget + 2 * (64 << 10)
    ld.close()


def test_close_cancels_what_is_read_ahead(tmp_path, range_server, dense):
    with FaultProxy(range_server.url, latency_ms=150) as proxy:

        def started(cache: str) -> Loader:
            # Two requests of one block at a time: most of the read-ahead waits
            # its turn.
            reader = open_remote(
                proxy.url + "/s", tmp_path / cache, max_concurrency=2, max_request_bytes=BLOCK
            )
            sampler = Sampler(RECORDS, BATCH, Sampler.Mode.SEQUENTIAL)
            ld = Loader({"x": [reader]}, sampler, workers=0)
            next(ld)
            return ld

        ld = started("open")
        time.sleep(0.1)
        n = proxy.requests()
        time.sleep(1.0)
        assert proxy.requests() > n  # still reading ahead
        ld.close()

        ld = started("closed")
        ld.close()
        time.sleep(0.1)
        n = proxy.requests()
        time.sleep(1.0)
        assert proxy.requests() == n


class TimedProxy(FaultProxy):
    """A FaultProxy that notes when each request arrived."""

    def __init__(self, upstream: str, latency_ms: float) -> None:
        super().__init__(upstream, latency_ms=latency_ms)
        self.arrivals: list[tuple[float, str, str, str | None]] = []

    def record(self, method: str, path: str, range_header: str | None) -> None:
        super().record(method, path, range_header)
        with self._count_lock:
            self.arrivals.append((time.monotonic(), method, path, range_header))


class NotedSampler:
    """A sampler that notes when the Loader draws each step (it begins the step
    right after); its copies note nothing."""

    def __init__(self, inner: WindowedSampler, drawn: list[float] | None) -> None:
        self.inner, self.drawn = inner, drawn

    @property
    def batch_size(self) -> int:
        return self.inner.batch_size

    def next(self):
        if self.drawn is not None:
            self.drawn.append(time.monotonic())
        return self.inner.next()

    def seek(self, step: int) -> None:
        self.inner.seek(step)

    def __deepcopy__(self, memo):
        return NotedSampler(copy.deepcopy(self.inner, memo), None)


def cold_pass(tmp_path, upstream: str, read_ahead_bytes: int, name: str) -> float:
    """The share of the steps from the fifth on of a cold windowed pass at 50 ms
    round trip, with one step prefetched, whose data blocks had all been asked
    for before the step was begun."""
    records, size = 2048, 4000
    with TimedProxy(upstream, latency_ms=50) as proxy:
        reader = Dense.open(
            proxy.url + "/w",
            storage_options={**HTTP_STORAGE_OPTIONS, "read_ahead_bytes": read_ahead_bytes},
            cache=Cache(tmp_path / name, max_bytes=64 << 20, block_bytes=BLOCK),
        )
        make = lambda: WindowedSampler.from_sizes(  # noqa: E731
            records, records * size, BATCH, seed=7, window_bytes=4 * BLOCK, block_bytes=BLOCK
        )
        drawn: list[float] = []
        check = make()
        with Loader({"x": [reader]}, NotedSampler(make(), drawn), workers=1, prefetch=1) as ld:
            steps = [check.next().copy() for _ in range(records // BATCH)]
            for want in steps:
                got = np.from_dlpack(next(ld)[0]["x"])
                np.testing.assert_array_equal(got[:, :2], np.stack([want % 256, want // 256], 1))
        first: dict[int, float] = {}
        for t, method, path, rng in proxy.arrivals:
            if method == "GET" and path == "/w/data-000.bin":
                m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
                assert m is not None
                for b in range(int(m[1]) // BLOCK, int(m[2]) // BLOCK + 1):
                    first.setdefault(b, t)
        early = 0
        for k in range(4, len(steps)):
            blocks = {int(p) * size // BLOCK for p in steps[k]} | {
                (int(p) * size + size - 1) // BLOCK for p in steps[k]
            }
            early += all(first[b] < drawn[k] for b in blocks)
        return early / (len(steps) - 4)


def test_a_cold_pass_at_50_ms_with_one_step_prefetched_fetches_ahead_of_its_steps(tmp_path):
    records, size = 2048, 4000
    values = np.zeros((records, size), np.uint8)
    values[:, 0], values[:, 1] = np.arange(records) % 256, np.arange(records) // 256
    with Dense.create(tmp_path / "w", np.uint8, (size,), codec="raw", data_shards=1) as w:
        w.append(values)
    with RangeServer(tmp_path) as server:
        ahead = cold_pass(tmp_path, server.url, 16 << 20, "ahead")
        alone = cold_pass(tmp_path, server.url, 0, "alone")
    # Without read-ahead a step's blocks are asked for when it is begun.
    assert alone <= 0.25, alone
    assert ahead >= 0.9, ahead


def test_a_block_a_gather_fetched_while_a_warm_waited_is_not_fetched_again(
    tmp_path, range_server, dense
):
    """A warm looks at the cache, then waits for the warm begun before it to
    reserve its blocks; a gather fetches the block meanwhile. The warm then
    finds the block in the cache once it claims it, and does not fetch it."""
    with FaultProxy(range_server.url) as proxy:
        reader = open_remote(proxy.url + "/s", tmp_path / "c")
        np.testing.assert_array_equal(np.from_dlpack(reader[np.array([0])]), dense[[0]])
        # Record 3000's index block is not in memory: this warm's index request
        # waits 600 ms, and the next warm reserves nothing until it has.
        before = proxy.requests("/s/index.bin")
        proxy.latency_ms = 600
        assert reader._warm(np.array([3000], np.uint64))
        deadline = time.monotonic() + 10
        while proxy.requests("/s/index.bin") == before:
            assert time.monotonic() < deadline, "the first warm never asked for its index block"
            time.sleep(0.005)
        proxy.latency_ms = 0
        # Record 200: index block 0 (in memory), data block 3 (not in the cache).
        block = 200 * RECORD // BLOCK
        assert reader._warm(np.array([200], np.uint64))
        time.sleep(0.1)  # the warm has looked at the cache, and waits
        np.testing.assert_array_equal(np.from_dlpack(reader[np.array([200])]), dense[[200]])
        assert proxy.block_gets("/s/data-000.bin", BLOCK).get(block) == 1
        quiet(proxy)
        assert proxy.block_gets("/s/data-000.bin", BLOCK).get(block) == 1


def test_over_a_cache_that_holds_every_block_steps_ahead_are_jumped_not_drawn(
    tmp_path, range_server, dense
):
    """Once warms find every block held, the Loader's copy of the sampler seeks
    past the steps the store says need no warm, instead of drawing each and
    asking the store about it; the values are unchanged."""
    sampler = WindowedSampler(open_remote(range_server.url + "/s", tmp_path / "c"), BATCH, seed=2)
    steps = 8 * RECORDS // BATCH
    fill = open_remote(range_server.url + "/s", tmp_path / "c")
    fill[np.arange(RECORDS, dtype=np.uint64)]
    reader = open_remote(range_server.url + "/s", tmp_path / "c")
    drawn = 0
    warm = reader._warm

    def counted(positions):
        # A refused call (0: enough warms run) is asked again for the same
        # step, which is not drawn again; only the others are steps drawn.
        nonlocal drawn
        n = warm(positions)
        drawn += n > 0
        return n

    reader._warm = counted
    check = copy.deepcopy(sampler)
    with Loader({"x": [reader]}, sampler, workers=1) as ld:
        for _ in range(steps):
            np.testing.assert_array_equal(np.from_dlpack(next(ld)[0]["x"]), dense[check.next()])
    # Steps read ahead: every step but the jumped ones would be drawn.
    assert 0 < drawn < steps // 4
