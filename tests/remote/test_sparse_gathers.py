"""A gather over a cold cache that would fetch many whole blocks of which it
uses little takes its own bytes now and leaves the blocks to come behind it,
on their way at once."""

import threading
import time

import numpy as np
from remote_servers import HTTP_STORAGE_OPTIONS, FaultProxy

from conftest import host
from loaderx.zrecord import Cache, Dense

# 640,000 records of 16 bytes: ten data blocks of 1 MiB (the last short).
N, RECORD, BLOCK = 640_000, 16, 1 << 20
BLOCKS = (N * RECORD + BLOCK - 1) // BLOCK
# Two records in each block, far apart.
POSITIONS = np.array(
    [b * (BLOCK // RECORD) + k for b in range(BLOCKS) for k in (7, 40_000)], dtype=np.int64
)
POSITIONS = POSITIONS[POSITIONS < N]


def write(path, n=N):
    values = np.arange(n * 2, dtype=np.int64).reshape(n, 2)
    with Dense.create(path, np.int64, (2,), codec="raw") as w:
        w.append(values)
    return values


def layout(store):
    """Where each record lies, (data file, offset) by position, from the
    store's index (24-byte entries: offset, stored length, data file,
    checksum), and the data files' sizes."""
    entries = np.fromfile(
        store / "index.bin",
        dtype=[("offset", "<u8"), ("len", "<u4"), ("file", "<u4"), ("sum", "<u8")],
    )
    assert (entries["len"] == RECORD).all()
    where = [
        (f"data-{f:03d}.bin", int(o))
        for f, o in zip(entries["file"], entries["offset"], strict=True)
    ]
    sizes = {f.name: f.stat().st_size for f in store.glob("data-*.bin")}
    return where, sizes


def whole_blocks(store, positions):
    """The GETs of the whole blocks the records at `positions` lie in."""
    where, sizes = layout(store)
    touched = {(where[p][0], where[p][1] // BLOCK) for p in positions}
    return sorted((f, b * BLOCK, min(sizes[f], (b + 1) * BLOCK) - 1) for f, b in touched)


def fetched_whole(server, store, positions, seconds=60.0):
    """Waits until the server has answered a GET of every whole block the
    records at `positions` lie in (the fetches behind a gather run on after it
    returns)."""
    want = set(whole_blocks(store, positions))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if want <= set(server.data_gets()):
            return
        time.sleep(0.05)
    raise AssertionError("the blocks behind the gather were not fetched")


def open_remote(server, tmp_path, **options):
    cache = Cache(tmp_path / "cache", max_bytes=1 << 30)
    return Dense.open(
        server.url + "/s", storage_options={**HTTP_STORAGE_OPTIONS, **options}, cache=cache
    )


def test_a_sparse_cold_gather_fetches_its_records_and_the_blocks_whole(tmp_path, range_server):
    values = write(tmp_path / "s")
    where, _ = layout(tmp_path / "s")
    with open_remote(range_server, tmp_path) as r:
        got = host(r[POSITIONS])
        returned = len(range_server.data_gets())
        np.testing.assert_array_equal(got, values[POSITIONS])
        fetched_whole(range_server, tmp_path / "s", POSITIONS)
        gets = range_server.data_gets()
        records = sorted((where[p][0], where[p][1], where[p][1] + RECORD - 1) for p in POSITIONS)
        small = [g for g in gets if g[2] - g[1] + 1 < BLOCK // 2]
        whole = [g for g in gets if g[2] - g[1] + 1 >= BLOCK // 2]
        # Its records alone, each once, asked for before it returned; and every
        # block it touched, whole and once, asked for from the moment it took
        # its parts (whatever their order at the server).
        assert sorted(small) == records
        assert returned >= len(small)
        assert sorted(whole) == whole_blocks(tmp_path / "s", POSITIONS)
        # The blocks are in the cache: the same gather again asks for nothing.
        range_server.reset_counts()
        np.testing.assert_array_equal(host(r[POSITIONS]), values[POSITIONS])
        assert range_server.data_gets() == []


def test_without_read_ahead_the_gather_fetches_whole_blocks(tmp_path, range_server):
    values = write(tmp_path / "s")
    with open_remote(range_server, tmp_path, read_ahead_bytes="0") as r:
        np.testing.assert_array_equal(host(r[POSITIONS]), values[POSITIONS])
        assert sorted(range_server.data_gets()) == whole_blocks(tmp_path / "s", POSITIONS)


def test_a_gather_using_its_blocks_densely_fetches_them_whole(tmp_path, range_server):
    values = write(tmp_path / "s")
    with open_remote(range_server, tmp_path) as r:
        every = np.arange(0, N, 8)  # two of every 16 records of every block
        np.testing.assert_array_equal(host(r[every]), values[every])
        assert sorted(range_server.data_gets()) == whole_blocks(tmp_path / "s", every)


def test_blocks_fetched_behind_do_not_hold_the_read_ahead_budget(tmp_path, range_server):
    # Two gathers of one record in each of ten blocks, the second's blocks not
    # the first's: a budget of 12 MiB holds the blocks behind one of them while
    # they are on their way, not those behind both.
    n = 2 * N
    values = write(tmp_path / "s", n)
    where, _ = layout(tmp_path / "s")
    picked: list[list[int]] = [[], []]
    seen: set[tuple[str, int]] = set()
    for p in range(7, n, 997):
        block = (where[p][0], where[p][1] // BLOCK)
        gather = next((g for g in picked if len(g) < 10), None)
        if gather is None:
            break
        if block not in seen:
            seen.add(block)
            gather.append(p)
    first, second = (np.array(g, dtype=np.int64) for g in picked)
    assert len(first) == len(second) == 10
    with open_remote(range_server, tmp_path, read_ahead_bytes=str(12 << 20)) as r:
        for positions in (first, second):
            np.testing.assert_array_equal(host(r[positions]), values[positions])
            fetched_whole(range_server, tmp_path / "s", positions)
        range_server.reset_counts()
        for positions in (first, second):
            np.testing.assert_array_equal(host(r[positions]), values[positions])
        assert range_server.data_gets() == []


def test_a_gather_beside_a_sparse_one_waits_for_the_blocks_it_is_fetching(tmp_path, range_server):
    """The blocks behind a sparse gather are on their way as soon as it takes its
    parts, not once they are in: a gather over the same blocks begun meanwhile
    waits for them, instead of asking for its own parts too."""
    values = write(tmp_path / "s")
    where, _ = layout(tmp_path / "s")
    beside = POSITIONS + 1  # the next record of each: the same blocks, other bytes
    with FaultProxy(range_server.url, latency_ms=300) as proxy, open_remote(proxy, tmp_path) as r:
        got: dict[str, np.ndarray] = {}
        first = threading.Thread(target=lambda: got.update(first=host(r[POSITIONS]).copy()))
        first.start()
        # Its parts have reached the proxy, which holds them back 300 ms.
        end = time.monotonic() + 30
        while sum(g[2] - g[1] + 1 == RECORD for g in proxy.data_gets()) < len(POSITIONS):
            assert time.monotonic() < end, "the first gather's parts never came"
            time.sleep(0.005)
        got["beside"] = host(r[beside]).copy()
        first.join()
        np.testing.assert_array_equal(got["first"], values[POSITIONS])
        np.testing.assert_array_equal(got["beside"], values[beside])
        parts = sorted(g for g in proxy.data_gets() if g[2] - g[1] + 1 < BLOCK // 2)
        assert parts == sorted(
            (where[p][0], where[p][1], where[p][1] + RECORD - 1) for p in POSITIONS
        )
        fetched_whole(range_server, tmp_path / "s", POSITIONS)
        whole = [g for g in range_server.data_gets() if g[2] - g[1] + 1 >= BLOCK // 2]
        assert sorted(whole) == whole_blocks(tmp_path / "s", POSITIONS), "each block once"


def test_blocks_behind_a_gather_hold_the_budget_until_they_are_in(tmp_path, range_server):
    # The ten blocks behind a first gather (10 MiB, sent at 1 MiB/s each) are
    # still on their way when a second gather, over ten other blocks, takes its
    # parts: a budget of 10 MiB has no room for the second's blocks, which are
    # then never fetched whole; the first's are.
    n = 2 * N
    values = write(tmp_path / "s", n)
    where, _ = layout(tmp_path / "s")
    first = POSITIONS
    second = POSITIONS + 10 * (BLOCK // RECORD)
    second = second[second < n]
    blocks = [{(where[p][0], where[p][1] // BLOCK) for p in g} for g in (first, second)]
    assert len(blocks[0]) == len(blocks[1]) == 10 and blocks[0].isdisjoint(blocks[1])
    with (
        FaultProxy(range_server.url, latency_ms=300, body_bytes_per_s=1 << 20) as proxy,
        open_remote(proxy, tmp_path, read_ahead_bytes=str(10 << 20)) as r,
    ):
        for positions in (first, second):
            np.testing.assert_array_equal(host(r[positions]), values[positions])
        fetched_whole(range_server, tmp_path / "s", first)
        time.sleep(1.0)  # three round trips: a block behind the second would be asked for
        assert not set(range_server.data_gets()) & set(whole_blocks(tmp_path / "s", second))
