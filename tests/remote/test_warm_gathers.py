"""Gathers whose blocks the process already holds in memory: the same values as
the local store, nothing asked of the server, and the same traffic counts."""

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS
from test_remote import POSITIONS, N, check, opener, write_store

from conftest import host
from loaderx.zrecord import Cache, Dense

# Record i of the Dense stores here is 6 x 5 float32: 120 stored bytes raw.
RECORD = 120


def open_cached(server, kind, tmp_path):
    cache = Cache(tmp_path / "cache", max_bytes=1 << 30, block_bytes=4096)
    return opener(kind)(server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_gathers_from_memory_equal_the_local_store(tmp_path, range_server, kind, codec):
    want = write_store(tmp_path / "s", kind, codec)
    local = opener(kind)(tmp_path / "s")
    with open_cached(range_server, kind, tmp_path) as r:
        check(r, kind, want, np.arange(N))
        range_server.reset_counts()
        for positions in (POSITIONS, np.arange(N)[::-1].copy(), np.array([7, 7, 7]), POSITIONS):
            check(r, kind, want, positions)
            if kind == "dense":
                np.testing.assert_array_equal(host(r[positions]), host(local[positions]))
        assert range_server.data_gets() == []


def test_a_warm_gather_counts_its_bytes_as_from_the_cache(tmp_path, range_server):
    write_store(tmp_path / "s", "dense", "raw")
    with open_cached(range_server, "dense", tmp_path) as r:
        r[np.arange(N)]
        fetched, from_cache = r.traffic()
        r[np.arange(N)]
        assert r.traffic() == (fetched, from_cache + N * RECORD)
        # Repeated and neighbouring records: each stored byte is read once.
        r[np.array([3, 3, 4, 200])]
        assert r.traffic() == (fetched, from_cache + N * RECORD + 3 * RECORD)


def test_a_gather_missing_one_block_fetches_that_block_alone(tmp_path, range_server):
    want = write_store(tmp_path / "s", "dense", "raw")
    with open_cached(range_server, "dense", tmp_path) as r:
        check(r, "dense", want, np.arange(10))
        fetched, from_cache = r.traffic()
        range_server.reset_counts()
        # Records 0..9 lie in the first block of the first data file, held in
        # memory; the last record lies in the last block of the last one.
        positions = np.array([*range(10), N - 1])
        check(r, "dense", want, positions)
        gets = range_server.data_gets()
        assert len(gets) == 1
        block = gets[0][2] - gets[0][1] + 1
        assert r.traffic() == (fetched + block, from_cache + 10 * RECORD)
        range_server.reset_counts()
        check(r, "dense", want, positions)
        assert range_server.data_gets() == []


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_large_records_across_blocks_read_from_memory_equal_the_local_store(
    tmp_path, range_server, codec
):
    # Records of 40,000 bytes in cache blocks of 64 KiB: most cross a block
    # boundary, and raw ones are copied into their output piece by piece.
    rng = np.random.default_rng(5)
    want = rng.integers(0, 256, size=(24, 40_000), dtype=np.uint8)
    with Dense.create(tmp_path / "s", np.uint8, (40_000,), codec=codec) as w:
        w.append(want)
    cache = Cache(tmp_path / "cache", max_bytes=1 << 30, block_bytes=1 << 16)
    url = range_server.url + "/s"
    with Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
        # Fetched into the cache, then read back from it into memory.
        for _ in range(2):
            np.testing.assert_array_equal(host(r[np.arange(24)]), want)
        range_server.reset_counts()
        for positions in ([23, 0, 11, 12, 5], [1, 1, 2], list(range(24))[::-1]):
            ids = np.array(positions)
            np.testing.assert_array_equal(host(r[ids]), want[ids])
        assert range_server.data_gets() == []


def test_a_gather_begun_after_a_warm_one_fetches_what_memory_lacks(tmp_path, range_server):
    # A gather begun right after one that found its blocks in memory is looked
    # up on the background gather thread; when its blocks are not all there,
    # it is fetched the usual way, and the gathers begun behind it still come.
    want = write_store(tmp_path / "s", "dense", "raw")
    with open_cached(range_server, "dense", tmp_path) as r:
        # Fetched, then read from the cache into memory, then read from memory.
        for _ in range(3):
            check(r, "dense", want, np.arange(10))
        fetched, from_cache = r.traffic()
        range_server.reset_counts()
        steps = [np.arange(10), np.arange(10)[::-1].copy(), np.array([*range(10), N - 1])]
        steps += [np.array([N - 1, 0]), np.arange(5)]
        begun = [r._begin(p, None) for p in steps]
        for p, b in zip(steps, begun, strict=True):
            np.testing.assert_array_equal(host(b()), want[p])
        gets = range_server.data_gets()
        assert len(gets) == 1
        block = gets[0][2] - gets[0][1] + 1
        # The records read from memory or the cache, 10 + 10 + 10 + 2 + 5, and
        # the one block fetched, for record N - 1.
        assert r.traffic() == (fetched + block, from_cache + 37 * RECORD)


def test_large_records_are_read_from_the_cache_files_into_their_output(tmp_path, range_server):
    """Large raw records whose blocks this process does not keep in memory (a
    new process over a warm cache) are read from the cache's block files
    straight into the output: the local store's values, nothing asked of the
    server, every byte counted as from the cache; a block file truncated
    meanwhile is fetched again, the values unchanged."""
    record = 40_000  # > 32 KiB: read into the output; blocks of 64 KiB, so most cross
    rng = np.random.default_rng(11)
    values = rng.integers(0, 256, (48, record), dtype=np.uint8)
    with Dense.create(tmp_path / "s", np.uint8, (record,), codec="raw", data_shards=2) as w:
        w.append(values)

    def reader():
        cache = Cache(tmp_path / "cache", max_bytes=1 << 30, block_bytes=64 << 10)
        return Dense.open(
            range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache
        )

    with reader() as r:
        np.testing.assert_array_equal(host(r[np.arange(48)]), values)
    picks = [np.array(p, np.uint64) for p in ([5, 0, 47, 5, 20], [46, 1, 2, 3], np.arange(48))]
    with reader() as r:
        range_server.reset_counts()
        before = r.traffic()
        for p in picks:
            np.testing.assert_array_equal(host(r[p]), values[p.astype(np.int64)])
        assert range_server.data_gets() == []
        after = r.traffic()
        unique = sum(len(set(p.tolist())) for p in picks)
        assert after.fetched - before.fetched == 0
        # Every record's bytes once per gather, and the index blocks once.
        index = (tmp_path / "s" / "index.bin").stat().st_size
        assert after.from_cache - before.from_cache == unique * record + index
    blocks = sorted(
        p
        for p in (tmp_path / "cache").rglob("*")
        if p.is_file() and p.name.isdigit() and "data-" in str(p)
    )
    assert blocks
    with reader() as r:
        for k, p in enumerate(blocks):
            with open(p, "r+b") as f:
                f.truncate(0 if k % 2 else p.stat().st_size // 2)
        np.testing.assert_array_equal(host(r[np.arange(48)]), values)
        assert range_server.data_gets() != []


@pytest.mark.parametrize(
    "block",
    [
        100,  # not a power of two: blocks found by division
        8,  # more blocks (4,500) than a store's table holds: its blocks are hashed
    ],
)
def test_warm_gathers_find_their_blocks_at_any_block_size(tmp_path, range_server, block):
    want = write_store(tmp_path / "s", "dense", "raw")
    local = Dense.open(tmp_path / "s")
    cache = Cache(tmp_path / "cache", max_bytes=1 << 30, block_bytes=block)
    with Dense.open(
        range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache
    ) as r:
        check(r, "dense", want, np.arange(N))  # fetched
        check(r, "dense", want, np.arange(N))  # read from the cache, kept in memory
        range_server.reset_counts()
        # Records cross blocks (120 bytes each), the last block is short.
        for positions in (POSITIONS, np.arange(N)[::-1].copy(), np.array([N - 1, 0, N - 1])):
            np.testing.assert_array_equal(host(r[positions]), host(local[positions]))
        assert range_server.data_gets() == []
