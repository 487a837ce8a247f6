"""One cold pass of a WindowedSampler through a remote reader whose block cache
directory holds two windows: the bytes of data files fetched from a counting
HTTP server stay within 1.1x the store's size (windows that align with neither
blocks nor data files), and the records are the local store's. A CYCLIC pass
through the same cache fetches 1.63x the store here (more than 1.3x is
asserted): the measure tells the two apart. (At this size the process also keeps
blocks in memory, so CYCLIC's excess is smaller than it is on a store larger
than that memory.) On a store of tiny records, whose index outweighs its data,
windows sized by index and data bytes together fetch each index block and each
data block about once, where windows sized by the data alone fetch the index
again and again."""

from __future__ import annotations

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS, FaultProxy

from loaderx import _native
from loaderx.dataloader import Loader
from loaderx.sampler import Sampler, WindowedSampler
from loaderx.zrecord import Cache, Dense

BLOCK = _native.DEFAULT_CACHE_BLOCK_BYTES
RECORDS = 16_384  # of 1000 bytes: 15.6 MiB; windows do not align with blocks or files
BATCH = 256
WINDOW = 4 * BLOCK


def data_bytes_fetched(server) -> int:
    """Bytes of data files the server was asked for, from the Range headers."""
    return sum(last - first + 1 for _, first, last in server.data_gets())


@pytest.fixture
def remote(tmp_path, range_server):
    values = np.arange(RECORDS * 1000, dtype=np.uint32).astype(np.uint8).reshape(RECORDS, 1000)
    # The first two bytes name the record, so every record differs.
    values[:, 0], values[:, 1] = np.arange(RECORDS) % 256, np.arange(RECORDS) // 256
    with Dense.create(tmp_path / "s", np.uint8, (1000,), codec="raw") as w:
        w.append(values)

    def open_cold(name: str) -> Dense:
        cache = Cache(tmp_path / name, max_bytes=2 * WINDOW)
        return Dense.open(
            range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache
        )

    return open_cold, values


def test_a_cold_windowed_pass_fetches_each_block_about_once(remote, range_server):
    open_cold, values = remote
    reader = open_cold("cache-windowed")
    store_bytes = sum(reader.data_file_sizes)
    sampler = WindowedSampler(reader, BATCH, seed=1, window_bytes=WINDOW)
    assert (sampler.windows, sampler.window_records) == (4, 4 * 1024)
    range_server.reset_counts()
    seen = []
    with Loader({"x": [reader]}, sampler, workers=0) as ld:
        check = WindowedSampler(reader, BATCH, seed=1, window_bytes=WINDOW)
        for _ in range(RECORDS // BATCH):
            got = np.from_dlpack(next(ld)[0]["x"])
            positions = check.next()
            np.testing.assert_array_equal(got, values[positions])
            seen.append(positions.copy())
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(RECORDS))
    fetched = data_bytes_fetched(range_server)
    assert store_bytes <= fetched <= 1.1 * store_bytes, (fetched, store_bytes)


def test_cyclic_through_the_same_cache_fetches_far_more(remote, range_server):
    open_cold, values = remote
    reader = open_cold("cache-cyclic")
    store_bytes = sum(reader.data_file_sizes)
    range_server.reset_counts()
    sampler = Sampler(RECORDS, BATCH, Sampler.Mode.CYCLIC, seed=1)
    check = Sampler(RECORDS, BATCH, Sampler.Mode.CYCLIC, seed=1)
    with Loader({"x": [reader]}, sampler, workers=0) as ld:
        for _ in range(RECORDS // BATCH):
            got = np.from_dlpack(next(ld)[0]["x"])
            np.testing.assert_array_equal(got, values[check.next()])
    fetched = data_bytes_fetched(range_server)
    requests = sum(1 for m, p, _ in range_server.log() if m == "GET" and "/data-" in p)
    # Its gathers touch a sixteenth of most blocks: they either fetch blocks
    # whole again and again (the cache holds two windows), or, where nothing is
    # fetching those blocks, take their records' bytes alone, one request
    # each. Either way far more than the windowed pass, which asks for each
    # block about once.
    blocks = -(-store_bytes // BLOCK)
    assert fetched > 1.3 * store_bytes or requests > 10 * blocks, (fetched, requests)


TINY = 131_072  # records of 8 bytes: 1 MiB of data, three times that of index
SMALL_BLOCK = 64 << 10


def index_bytes_fetched(server) -> int:
    return server.bytes_of("/t/index.bin")


@pytest.fixture
def tiny(tmp_path, range_server):
    """A store of tiny records, whose index outweighs its data, and an opener
    of it with a cold cache of two windows and room in memory for one index
    block (a store far larger than the memory kept for its index)."""
    values = np.arange(TINY, dtype="<u8").view(np.uint8).reshape(TINY, 8)
    with Dense.create(tmp_path / "t", np.uint8, (8,), codec="raw", data_shards=1) as w:
        w.append(values)
    window = 16 * SMALL_BLOCK

    def open_cold(name: str) -> Dense:
        return Dense.open(
            range_server.url + "/t",
            storage_options={**HTTP_STORAGE_OPTIONS, "index_memory_bytes": SMALL_BLOCK},
            cache=Cache(tmp_path / name, max_bytes=2 * window, block_bytes=SMALL_BLOCK),
        )

    return open_cold, values, window


def test_windows_counting_the_index_fetch_each_index_and_data_block_about_once(tiny, range_server):
    open_cold, values, window = tiny
    reader = open_cold("cache-tiny")
    data, index = sum(reader.data_file_sizes), reader.index_bytes
    assert (data, index) == (TINY * 8, TINY * 24)

    def sampler(index_bytes: int) -> WindowedSampler:
        return WindowedSampler.from_sizes(
            TINY,
            data,
            BATCH,
            seed=2,
            window_bytes=window,
            block_bytes=SMALL_BLOCK,
            index_bytes=index_bytes,
        )

    # A window is a quarter of the records the data alone would give it.
    assert sampler(index).window_records * 4 == sampler(0).window_records == TINY
    range_server.reset_counts()
    seen = []
    check = sampler(index)
    with Loader({"x": [reader]}, sampler(index), workers=0) as ld:
        for _ in range(TINY // BATCH):
            positions = check.next()
            np.testing.assert_array_equal(np.from_dlpack(next(ld)[0]["x"]), values[positions])
            seen.append(positions.copy())
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(TINY))
    assert index <= index_bytes_fetched(range_server) <= 1.1 * index
    assert data <= data_bytes_fetched(range_server) <= 1.1 * data
    # Sized by the data alone, one window spans the store, whose index blocks the
    # cache cannot hold besides its data: a fifth of the pass fetches 2.2x the
    # index here (more than 1.5x is asserted).
    reader = open_cold("cache-data-only")
    range_server.reset_counts()
    with Loader({"x": [reader]}, sampler(0), workers=0) as ld:
        for _ in range(TINY // BATCH // 5):
            next(ld)
    assert index_bytes_fetched(range_server) > 1.5 * index


@pytest.mark.parametrize("workers", [0, 2])
def test_a_cold_pass_at_50_ms_through_the_loader_fetches_each_block_once(
    tmp_path, range_server, workers
):
    """The Loader's defaults over a WindowedSampler, through a cache that holds
    the store, with read-ahead racing the gathers: each data block and each
    index block is asked for once in the whole pass. A block a gather or a
    read-ahead fetched while another looked at the cache and found it missing is
    read from the cache, not fetched again."""
    records, size = 24_576, 256  # 6 MiB of data, 96 steps of 256, 24 steps a window
    values = np.zeros((records, size), np.uint8)
    values[:, 0], values[:, 1] = np.arange(records) % 256, np.arange(records) // 256
    with Dense.create(tmp_path / "c", np.uint8, (size,), codec="raw", data_shards=1) as w:
        w.append(values)
    small = 64 << 10
    with FaultProxy(range_server.url, latency_ms=50) as proxy:
        reader = Dense.open(
            proxy.url + "/c",
            storage_options=HTTP_STORAGE_OPTIONS,
            cache=Cache(tmp_path / f"cache-{workers}", max_bytes=256 << 20, block_bytes=small),
        )
        make = lambda: WindowedSampler(reader, BATCH, seed=4, window_bytes=24 * small)  # noqa: E731
        check = make()
        assert check.windows > 2
        proxy.reset_counts()
        with Loader({"x": [reader]}, make(), workers=workers) as ld:
            for _ in range(records // BATCH):
                want = check.next()
                got = np.from_dlpack(next(ld)[0]["x"])
                np.testing.assert_array_equal(got[:, :2], np.stack([want % 256, want // 256], 1))
        data = proxy.block_gets("/c/data-000.bin", small)
        index = proxy.block_gets("/c/index.bin", _native.INDEX_BLOCK_BYTES)
    assert sorted(data) == list(range(-(-records * size // small)))
    assert max(data.values()) == 1, {b: n for b, n in data.items() if n > 1}
    assert sorted(index) == list(range(-(-records * 24 // _native.INDEX_BLOCK_BYTES)))
    assert max(index.values()) == 1, {b: n for b, n in index.items() if n > 1}


def test_a_pass_over_a_warm_cache_reads_each_block_from_it_once(tiny, range_server):
    """A store opened anew over a cache a pass filled: the Loader's pass (and
    the read-ahead warming its steps) reads each index and data block from the
    cache's files about once, as the cold pass fetched each once; concurrent
    reads of one index block wait for the first instead of each reading it."""
    _, values, window = tiny
    data, index = TINY * 8, TINY * 24

    def one_pass(reader) -> None:
        make = lambda: WindowedSampler(reader, BATCH, seed=2, window_bytes=window)  # noqa: E731
        check = make()
        with Loader({"x": [reader]}, make()) as ld:
            for _ in range(TINY // BATCH):
                got = np.from_dlpack(next(ld)[0]["x"])
                np.testing.assert_array_equal(got, values[check.next()])

    def open_warm() -> Dense:
        return Dense.open(
            range_server.url + "/t",
            storage_options=HTTP_STORAGE_OPTIONS,
            cache=Cache(cache_dir, max_bytes=64 << 20, block_bytes=SMALL_BLOCK),
        )

    cache_dir = range_server.root / "cache-warm-pass"
    one_pass(open_warm())
    reader = open_warm()
    range_server.reset_counts()
    one_pass(reader)
    assert data_bytes_fetched(range_server) == index_bytes_fetched(range_server) == 0
    assert data + index <= reader.traffic().from_cache <= 1.1 * (data + index), reader.traffic()
