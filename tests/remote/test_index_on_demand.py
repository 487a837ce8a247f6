"""A remote store's index is fetched on demand: opening reads the header, the
dictionary, the attributes and index.sum (whatever the record count), a gather
fetches exactly the index blocks its records' entries lie in, each checked
against index.sum, so that a damaged or replaced block is an error naming the
store and the block; blocks are kept in memory within a budget and in the block
cache, where a second process finds them. Every request is counted by a real
HTTP server on 127.0.0.1."""

import json
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS, RangeServer

from conftest import host
from loaderx import _native
from loaderx.errors import InvalidArgumentError, StorageError, ZrecordError
from loaderx.zrecord import Cache, Dense, Ragged, RaggedBatch

BLOCK = _native.INDEX_BLOCK_BYTES
CODECS = ["raw", "zstd", "zstd_dict"]


def tiny_store(path, n):
    """A Dense uint8 store of `n` scalar records (record i holds i % 251): its
    index is 24 bytes a record, its data one byte a record."""
    with Dense.create(path, np.uint8, (), codec="raw", data_shards=1) as w:
        w.append((np.arange(n) % 251).astype(np.uint8))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A server over stores of 10 thousand and 10 million tiny records."""
    root = tmp_path_factory.mktemp("tiny")
    tiny_store(root / "small", 10_000)
    tiny_store(root / "big", 10_000_000)
    with RangeServer(root) as server:
        yield server, root


def index_ranges(server, store):
    """The byte ranges (start, end) asked of `store`'s index.bin, sorted (the
    size asked at open is a HEAD, not a range)."""
    out = []
    for method, path, rng in server.log():
        if path == f"/{store}/index.bin" and method != "HEAD":
            assert method == "GET" and rng is not None, (method, rng)
            a, b = rng.removeprefix("bytes=").split("-")
            out.append((int(a), int(b) + 1))
    return sorted(out)


def blocks_of(positions, entry, index_size):
    """The byte ranges of the index blocks the entries of `positions` lie in,
    neighbouring blocks in one range."""
    blocks = sorted(
        {p * entry // BLOCK for p in positions}
        | {(p * entry + entry - 1) // BLOCK for p in positions}
    )
    runs = []
    for b in blocks:
        if runs and runs[-1][1] == b:
            runs[-1][1] = b + 1
        else:
            runs.append([b, b + 1])
    return [(a * BLOCK, min(z * BLOCK, index_size)) for a, z in runs]


def test_opening_costs_the_same_whatever_the_record_count(tiny):
    server, root = tiny
    seen = {}
    for name in ("small", "big"):
        server.reset_counts()
        r = Dense.open(f"{server.url}/{name}", storage_options=HTTP_STORAGE_OPTIONS)
        assert len(r) == {"small": 10_000, "big": 10_000_000}[name]
        log = [(m, p.removeprefix(f"/{name}/"), rng) for m, p, rng in server.log()]
        sums = (root / name / "index.sum").stat().st_size
        assert ("GET", "index.sum", f"bytes=0-{sums - 1}") in log
        assert server.bytes_of(f"/{name}/index.sum") == sums
        # The index's size is asked (a HEAD, no byte of it), never its entries.
        assert [m for m, p, _ in log if p == "index.bin"] == ["HEAD"]
        assert server.bytes_of(f"/{name}/index.bin") == 0
        rest = sorted((e for e in log if e[1] != "index.sum"), key=str)
        seen[name] = (rest, server.body_bytes() - sums)
        r.close()
    assert seen["small"] == seen["big"]
    # Two round trips: the header by one bounded read (its response gives its
    # size), then index.sum and the other files' sizes at once.
    assert seen["big"][0] == [
        ("GET", "header.bin", "bytes=0-262143"),
        ("HEAD", "data-000.bin", None),
        ("HEAD", "index.bin", None),
    ]
    # The big store's index is 240 MB; its checksums are 8 bytes per block.
    assert (root / "big" / "index.bin").stat().st_size == 240_000_000
    assert (root / "big" / "index.sum").stat().st_size == 240_000_000 // BLOCK * 8 + 8


def test_a_first_gather_fetches_only_the_index_blocks_it_touches(tiny):
    server, _ = tiny
    n = 10_000_000
    # 2730's entry crosses from block 0 into block 1; the others lie in one block.
    positions = np.array([5_000_000, 2730, n - 1, 0, 5_000_001], dtype=np.int64)
    want = (positions % 251).astype(np.uint8)
    r = Dense.open(f"{server.url}/big", storage_options=HTTP_STORAGE_OPTIONS)
    server.reset_counts()
    np.testing.assert_array_equal(host(r[positions]), want)
    expected = blocks_of(positions.tolist(), 24, 24 * n)
    assert expected == [
        (0, 2 * BLOCK),
        (120_000_000 // BLOCK * BLOCK, (120_000_000 // BLOCK + 1) * BLOCK),
        (24 * (n - 1) // BLOCK * BLOCK, 24 * n),
    ]
    assert index_ranges(server, "big") == expected
    assert server.bytes_of("/big/index.bin") == sum(b - a for a, b in expected)
    # Kept in memory: the same records again ask for no index block.
    server.reset_counts()
    np.testing.assert_array_equal(host(r[positions]), want)
    assert server.requests("/big/index.bin") == 0
    r.close()
    # With no memory for index blocks, each gather fetches its own.
    opts = {**HTTP_STORAGE_OPTIONS, "index_memory_bytes": 0}
    r = Dense.open(f"{server.url}/big", storage_options=opts)
    for _ in range(2):
        server.reset_counts()
        np.testing.assert_array_equal(host(r[positions]), want)
        assert index_ranges(server, "big") == expected
    r.close()


def test_a_bad_memory_budget_is_refused_naming_its_key(tiny):
    server, _ = tiny
    for bad in (-1, "lots", 1.5):
        opts = {**HTTP_STORAGE_OPTIONS, "index_memory_bytes": bad}
        with pytest.raises(InvalidArgumentError, match="storage option index_memory_bytes"):
            Dense.open(f"{server.url}/small", storage_options=opts)
    assert _native.DEFAULT_INDEX_MEMORY_BYTES == 256 << 20
    assert "index_memory_bytes" in _native.LOADERX_STORAGE_OPTIONS


def write_store(path, kind, codec, n):
    """A store of `n` records whose index spans several blocks; returns them."""
    rng = np.random.default_rng(7)
    dict_bytes = bytes(range(256)) * 8 if codec == "zstd_dict" else None
    if kind == "dense":
        values = rng.integers(0, 50, size=(n, 6, 5)).astype(np.float32)
        with Dense.create(path, np.float32, (6, 5), codec=codec, dict_bytes=dict_bytes) as w:
            w.append(values)
        return values
    records = [
        rng.integers(0, 9, size=(int(rng.integers(0, 12)), 3)).astype(np.int16) for _ in range(n)
    ]
    with Ragged.create(path, np.int16, ndim=2, codec=codec, dict_bytes=dict_bytes) as w:
        w.append(RaggedBatch.from_records(records))
    return records


def same(got, want, kind):
    if kind == "dense":
        np.testing.assert_array_equal(host(got), want)
    else:
        tensors = [host(t) for t in got.to_tensors()]
        assert len(tensors) == len(want)
        for g, w in zip(tensors, want, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("codec", CODECS)
def test_values_equal_the_local_store(tmp_path, range_server, kind, codec):
    n = 9_000
    want = write_store(tmp_path / "s", kind, codec, n)
    opener = Dense.open if kind == "dense" else Ragged.open
    local = opener(tmp_path / "s")
    assert (tmp_path / "s" / "index.bin").stat().st_size > 3 * BLOCK
    # Room for one block between gathers: most gathers fetch again.
    opts = {**HTTP_STORAGE_OPTIONS, "index_memory_bytes": BLOCK}
    with opener(range_server.url + "/s", storage_options=opts) as r:
        rng = np.random.default_rng(3)
        for positions in (rng.integers(0, n, 64), np.arange(n), np.arange(n)[::-1].copy()):
            pick = [want[p] for p in positions] if kind == "ragged" else want[positions]
            same(r[positions], pick, kind)
        got, expect = r.record_sizes(), local.record_sizes()
        np.testing.assert_array_equal(got.logical, expect.logical)
        np.testing.assert_array_equal(got.stored, expect.stored)
        sizes = r.record_sizes(2000, 2100)
        np.testing.assert_array_equal(sizes.stored, expect.stored[2000:2100])
        assert r.stats() == local.stats()
        if kind == "ragged":
            np.testing.assert_array_equal(r.lengths(), local.lengths())
            np.testing.assert_array_equal(r.lengths(4000, 4100), local.lengths(4000, 4100))
        r.verify()
        r.verify(progress=lambda *a: None)


def damaged_copy(tmp_path, how):
    """A served copy of a store whose index block 2 is damaged `how`."""
    want = write_store(tmp_path / "s", "dense", "zstd", 9_000)
    shutil.copytree(tmp_path / "s", tmp_path / "served" / "s")
    index = tmp_path / "served" / "s" / "index.bin"
    data = bytearray(index.read_bytes())
    if how == "flipped":
        data[2 * BLOCK + 100] ^= 0x01
    else:
        # Well-formed entries in the wrong place: block 1's bytes as block 2.
        data[2 * BLOCK : 3 * BLOCK] = data[BLOCK : 2 * BLOCK]
    index.write_bytes(bytes(data))
    return want


@pytest.mark.parametrize("how", ["flipped", "replaced"])
def test_a_damaged_index_block_is_an_error_naming_the_store_and_block(tmp_path, how):
    want = damaged_copy(tmp_path, how)
    with RangeServer(tmp_path / "served") as server:
        url = server.url + "/s"
        r = Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS)
        # Block 2 holds the entries of records 5462 to 8191.
        np.testing.assert_array_equal(host(r[[0, 2000, 8500]]), want[[0, 2000, 8500]])
        message = f"{url}/index.bin: index block 2 checksum mismatch (the index is damaged)"
        for read in (
            lambda: r[[0, 6000]],
            lambda: r.record_sizes(5000, 6000),
            lambda: r.stats(),
            lambda: r.verify(),
        ):
            with pytest.raises(ZrecordError) as e:
                read()
            assert str(e.value) == message
        # Nothing of the damaged block was kept: asking again fetches it again.
        server.reset_counts()
        with pytest.raises(ZrecordError, match="index block 2 checksum mismatch"):
            r[[6000]]
        assert index_ranges(server, "s") == [(2 * BLOCK, 3 * BLOCK)]
        r.close()


def resized_copy(tmp_path, name: str, changed) -> tuple[bytes, str]:
    """A copy under `served/s` of a store of 9,000 records whose file `name` is
    removed (`changed` None) or rewritten as `changed(its bytes)`: its bytes, and
    why an open refuses the copy."""
    write_store(tmp_path / "s", "dense", "zstd", 9_000)
    shutil.copytree(tmp_path / "s", tmp_path / "served" / "s")
    path = tmp_path / "served" / "s" / name
    data = path.read_bytes()
    if changed is None:
        path.unlink()
        return data, f"the file is missing (the header says it is {len(data)} bytes)"
    path.write_bytes(changed(data))
    return data, f"the file is {len(changed(data))} bytes but the header says {len(data)}"


@pytest.mark.parametrize("how", ["truncated", "extended", "missing"])
def test_an_index_of_another_size_than_the_header_says_fails_the_open(tmp_path, how):
    changed = {
        "truncated": lambda d: d[: 2 * BLOCK + 100],
        "extended": lambda d: d + b"\0" * 8,
        "missing": None,
    }[how]
    _, why = resized_copy(tmp_path, "index.bin", changed)
    with RangeServer(tmp_path / "served") as server:
        url = server.url + "/s"
        with pytest.raises(ZrecordError) as e:
            Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS)
        assert str(e.value) == f"{url}/index.bin: {why}"


@pytest.mark.parametrize("part", [None, 8])
@pytest.mark.parametrize("how", ["emptied", "truncated", "extended", "missing"])
def test_checksums_of_another_size_than_the_header_says_fail_the_open(tmp_path, how, part):
    """index.sum is read by requests whose answers give its size too (one, or one a
    part of `part` bytes): a file of any other size than the header's, empty or
    missing, fails the open by name."""
    changed = {
        "emptied": lambda d: b"",
        "truncated": lambda d: d[:16],
        "extended": lambda d: d + b"\0" * 8,
        "missing": None,
    }[how]
    data, why = resized_copy(tmp_path, "index.sum", changed)
    sums = tmp_path / "served" / "s" / "index.sum"
    with RangeServer(tmp_path / "served") as server:
        url = server.url + "/s"
        opts = {**HTTP_STORAGE_OPTIONS, "max_request_bytes": part or 1 << 20}
        with pytest.raises(ZrecordError) as e:
            Dense.open(url, storage_options=opts)
        assert str(e.value) == f"{url}/index.sum: {why}"
    # Restored, it is read in its parts, each once (a fresh server: the failed
    # open's abandoned requests may still reach the first).
    sums.write_bytes(data)
    with RangeServer(tmp_path / "served") as server:
        with Dense.open(server.url + "/s", storage_options=opts) as r:
            assert len(r) == 9_000
        asked = sorted(rng for m, p, rng in server.log() if p == "/s/index.sum" and m == "GET")
        step = part or len(data)
        want = [f"bytes={a}-{min(a + step, len(data)) - 1}" for a in range(0, len(data), step)]
        assert asked == sorted(want)


def test_a_header_is_read_by_one_request_and_refused_when_too_large_or_empty(tmp_path):
    write_store(tmp_path / "s", "dense", "zstd", 100)
    served = tmp_path / "served" / "s"
    shutil.copytree(tmp_path / "s", served)
    header = served / "header.bin"
    with RangeServer(tmp_path / "served") as server:
        url = server.url + "/s"
        header.write_bytes(b"\0" * (256 << 10 | 1))
        with pytest.raises(ZrecordError) as e:
            Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS)
        assert str(e.value) == (
            f"{url}/header.bin: the header is 262145 bytes; a header is at most 262144"
        )
        header.write_bytes(b"")
        server.reset_counts()
        with pytest.raises(ZrecordError) as e:
            Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS)
        assert str(e.value) == f"{url}/header.bin: not a zrecord header (bad magic)"
        # The empty file cannot answer a range; its size is asked after.
        assert [(m, p) for m, p, _ in server.log()] == [
            ("GET", "/s/header.bin"),
            ("HEAD", "/s/header.bin"),
        ]


CHILD = """
import json, sys
import numpy as np
from loaderx.zrecord import Cache, Dense
url, cache, positions = json.loads(sys.argv[1])
r = Dense.open(url, storage_options={"allow_http": "true"}, cache=Cache(cache))
print(json.dumps(np.asarray(r[positions]).tolist()))
"""


def test_a_second_process_reads_index_blocks_from_the_cache(tmp_path, range_server):
    want = write_store(tmp_path / "s", "dense", "zstd", 9_000)
    url = range_server.url + "/s"
    positions = [0, 3000, 6000, 8999]
    with Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=Cache(tmp_path / "c")) as r:
        np.testing.assert_array_equal(host(r[positions]), want[positions])
    assert range_server.bytes_of("/s/index.bin") == 4 * BLOCK + (9_000 * 24 - 4 * BLOCK)

    def child():
        range_server.reset_counts()
        arg = json.dumps([url, str(tmp_path / "c"), positions])
        out = subprocess.run(
            [sys.executable, "-c", CHILD, arg], check=True, capture_output=True, timeout=120
        )
        np.testing.assert_array_equal(np.array(json.loads(out.stdout)), want[positions])

    child()
    # Only its size is asked at open; every block came from the cache.
    assert range_server.bytes_of("/s/index.bin") == 0
    # A damaged cached block is dropped and fetched again, never read.
    cached = [p for p in (tmp_path / "c").rglob("*") if p.parent.name == "index.bin"]
    assert sorted(int(p.name) for p in cached) == [0, 1, 2, 3]
    block1 = next(p for p in cached if p.name == "1")
    data = bytearray(block1.read_bytes())
    data[7] ^= 0xFF
    block1.write_bytes(bytes(data))
    child()
    assert index_ranges(range_server, "s") == [(BLOCK, 2 * BLOCK)]
    assert block1.read_bytes() == (tmp_path / "s" / "index.bin").read_bytes()[BLOCK : 2 * BLOCK]


def test_a_failed_index_fetch_names_the_index(tmp_path, range_server, fault_proxy):
    want = write_store(tmp_path / "s", "dense", "zstd", 9_000)
    opts = {**HTTP_STORAGE_OPTIONS, "retries": "1", "retry_backoff": "0.01"}
    r = Dense.open(fault_proxy.url + "/s", storage_options=opts)
    fault_proxy.fail_next(1000, 500)
    with pytest.raises(StorageError, match="failed 2 times") as e:
        r[[6000]]
    assert e.value.filename == fault_proxy.url + "/s/index.bin"
    fault_proxy.clear_faults()
    np.testing.assert_array_equal(host(r[[6000]]), want[[6000]])


@pytest.mark.parametrize("cached", [False, True])
def test_concurrent_gathers_fetch_a_missing_index_block_once(
    tmp_path, range_server, fault_proxy, cached
):
    want = write_store(tmp_path / "s", "dense", "zstd", 9_000)
    cache = Cache(tmp_path / "c") if cached else None
    r = Dense.open(fault_proxy.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache)
    # Long enough that every gather asks for block 0 while the first fetch of
    # it is still on its way.
    fault_proxy.latency_ms = 300
    range_server.reset_counts()
    errors = []

    def gather(k):
        try:
            np.testing.assert_array_equal(host(r[[k, k + 1]]), want[[k, k + 1]])
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=gather, args=(k * 100,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert index_ranges(range_server, "s") == [(0, BLOCK)]
    r.close()


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("cached", [False, True])
def test_an_empty_store_opens_as_it_does_locally(tmp_path, kind, cached):
    # An empty index has no block checksums; opening it remotely raised
    # InternalError ("an index without block checksums must be read whole").
    local = tmp_path / "served" / "s"
    if kind == "dense":
        Dense.create(local, np.int32, (3,), codec="zstd").close()
        opener = Dense
    else:
        Ragged.create(local, np.int32, ndim=1, codec="raw").close()
        opener = Ragged
    assert len(opener.open(local)) == 0
    cache = Cache(tmp_path / "cache") if cached else None
    with RangeServer(tmp_path / "served") as server:
        with opener.open(server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
            assert len(r) == 0
            assert r.traffic().fetched == server.body_bytes()
            r.verify()
            with pytest.raises(IndexError):
                r[0]
