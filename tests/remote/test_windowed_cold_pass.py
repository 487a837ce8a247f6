"""One cold pass of a WindowedSampler through a remote reader whose block cache
directory holds two windows: the bytes of data files fetched from a counting
HTTP server stay within 1.1x the store's size (windows that align with neither
blocks nor data files), and the records are the local store's. A CYCLIC pass
through the same cache fetches 1.63x the store here (more than 1.3x is
asserted): the measure tells the two apart. (At this size the process also keeps
blocks in memory, so CYCLIC's excess is smaller than it is on a store larger
than that memory.)"""

from __future__ import annotations

import re

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS

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
    total = 0
    for method, path, rng in server.log():
        if method != "GET" or "/data-" not in path:
            continue
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
        assert m is not None, (path, rng)
        total += int(m[2]) - int(m[1]) + 1
    return total


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
    assert (sampler.windows, sampler.window_records) == (4, 4 * 1048)
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
    assert fetched > 1.3 * store_bytes, (fetched, store_bytes)
