"""Stores read from object storage: exact values through s3:// (moto), http://
(a range server) and file://, the Loader over remote readers, the block cache
(warm reads never reach the server; a replaced store never meets stale blocks),
and faults (errors, truncated bodies, resets, slow responses, a restarting
server) that end in retried success or a StorageError naming the URL, never in
wrong data."""

import json
import os
import pickle
import shutil
import threading
import time

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS

from conftest import host
from loaderx.dataloader import Loader
from loaderx.errors import (
    InvalidArgumentError,
    StorageError,
    StoreExistsError,
    StoreNotFoundError,
    ZrecordError,
)
from loaderx.zrecord import Cache, Dense, Ragged, RaggedBatch, upload

N = 300
CODECS = ["raw", "zstd", "zstd_dict"]
# Retries that wait little, so that fault tests stay short.
FAST = {"retry_backoff": "0.01", "retries": "4"}


def dense_values(seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 50, size=(N, 6, 5)).astype(np.float32)


def ragged_records(seed):
    rng = np.random.default_rng(seed)
    return [
        rng.integers(0, 9, size=(int(rng.integers(0, 40)), 3)).astype(np.int16) for _ in range(N)
    ]


def write_store(path, kind, codec, seed=0):
    """A store at `path`; returns what it holds."""
    dict_bytes = None
    if kind == "dense":
        values = dense_values(seed)
        if codec == "zstd_dict":
            dict_bytes = bytes(range(256)) * 8
        with Dense.create(
            path, np.float32, (6, 5), codec=codec, data_shards=3, dict_bytes=dict_bytes
        ) as w:
            w.append(values)
        return values
    records = ragged_records(seed)
    if codec == "zstd_dict":
        dict_bytes = bytes(range(256)) * 8
    with Ragged.create(
        path, np.int16, ndim=2, codec=codec, data_shards=3, dict_bytes=dict_bytes
    ) as w:
        w.append(RaggedBatch.from_records(records))
    return records


def check(reader, kind, want, positions):
    """The reader's records at `positions` equal `want`'s, exactly."""
    if kind == "dense":
        got = host(reader[positions])
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want[positions])
    else:
        batch = reader[positions]
        got = [host(t) for t in batch.to_tensors()]
        assert len(got) == len(positions)
        for g, p in zip(got, positions, strict=True):
            assert g.dtype == np.int16
            np.testing.assert_array_equal(g, want[p])


POSITIONS = np.array([5, 299, 0, 5, 17, 150, 151, 152, 42, 298], dtype=np.int64)


def opener(kind):
    return Dense.open if kind == "dense" else Ragged.open


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("codec", CODECS)
def test_http_exact_values(tmp_path, range_server, kind, codec):
    want = write_store(tmp_path / "s", kind, codec)
    url = range_server.url + "/s"
    with opener(kind)(url, storage_options=HTTP_STORAGE_OPTIONS) as r:
        assert len(r) == N and r.codec == codec and r.url == url and r.path == url
        assert r.checked  # remote reads always check record checksums
        check(r, kind, want, POSITIONS)
        check(r, kind, want, np.arange(N))
        local = opener(kind)(tmp_path / "s")
        assert r.header_checksum == local.header_checksum
        r.verify()


def test_s3_every_kind_and_codec_via_upload(tmp_path, moto_s3, s3_bucket):
    opts = moto_s3.storage_options()
    for kind in ("dense", "ragged"):
        for codec in CODECS:
            want = write_store(tmp_path / f"{kind}-{codec}", kind, codec)
            url = f"s3://{s3_bucket}/stores/{kind}-{codec}"
            upload(tmp_path / f"{kind}-{codec}", url, storage_options=opts)
            with opener(kind)(url, storage_options=opts) as r:
                assert (len(r), r.codec) == (N, codec)
                check(r, kind, want, POSITIONS)
                check(r, kind, want, np.arange(N)[::-1].copy())
    with Dense.open(f"s3://{s3_bucket}/stores/dense-zstd", storage_options=opts) as r:
        r.verify()


def test_file_urls_read_local_stores(tmp_path):
    want = write_store(tmp_path / "s", "dense", "zstd")
    with Dense.open("file://" + str(tmp_path / "s")) as r:
        check(r, "dense", want, POSITIONS)
        r.verify()


def test_loader_over_remote_readers(tmp_path, range_server):
    want_x = write_store(tmp_path / "x", "dense", "zstd")
    want_t = write_store(tmp_path / "t", "ragged", "raw")
    x = Dense.open(range_server.url + "/x", storage_options=HTTP_STORAGE_OPTIONS)
    t = Ragged.open(range_server.url + "/t", storage_options=HTTP_STORAGE_OPTIONS)

    class Fixed:
        batch_size = 16

        def __init__(self):
            self.step = 0

        def next(self):
            i = np.arange(self.step * 16, (self.step + 1) * 16)
            self.step += 1
            return ((i * 37) % N).astype(np.uint64)

        def seek(self, step):
            self.step = step

        def config(self):
            return ("fixed", 16)

    for workers in (0, 2):
        with Loader({"x": [x, x], "t": [t, t]}, Fixed(), workers=workers, prefetch=3) as loader:
            for k in range(6):
                shards = next(loader)
                pos = ((np.arange(k * 16, (k + 1) * 16) * 37) % N).reshape(2, 8)
                for shard, p in zip(shards, pos, strict=True):
                    np.testing.assert_array_equal(host(shard["x"]), want_x[p])
                    got = [host(a) for a in shard["t"].to_tensors()]
                    for g, q in zip(got, p, strict=True):
                        np.testing.assert_array_equal(g, want_t[q])


class Spread:
    """Batches of 4 records 70 apart: with coalescing off, 4 requests a step."""

    batch_size = 4

    def __init__(self):
        self.step = 0

    def next(self):
        i = (self.step + np.arange(4) * 70) % N
        self.step += 1
        return i.astype(np.int64)


def read_spread(loader, want, steps, proxy):
    """Checks `steps` steps of a loader over Spread's batches and returns the most
    requests the proxy held at once meanwhile (before the close, which cancels the
    reads begun ahead: a cancelled request may still sleep in the proxy while the
    budget place it freed goes to the next)."""
    with loader:
        for step in range(steps):
            got = host(next(loader)[0]["x"])
            np.testing.assert_array_equal(got, want[(step + np.arange(4) * 70) % N])
        return proxy.most_in_flight()


def test_the_loader_overlaps_the_reads_of_steps_ahead(via_proxy, fault_proxy):
    want, open_ = via_proxy
    r = open_(coalesce_gap="0")
    fault_proxy.latency_ms = 100
    fault_proxy.reset_counts()
    most = read_spread(Loader({"x": [r]}, Spread(), workers=1, prefetch=5), want, 12, fault_proxy)
    # One worker, yet the requests of several steps waited at the proxy at once:
    # the steps up to workers + prefetch ahead were begun before the first was
    # complete. One step at a time would never exceed its 4 requests.
    assert most > 8


def test_max_concurrency_bounds_a_stores_requests_across_steps(via_proxy, fault_proxy):
    want, open_ = via_proxy
    r = open_(coalesce_gap="0", max_concurrency="3")
    fault_proxy.latency_ms = 30
    fault_proxy.reset_counts()
    most = read_spread(Loader({"x": [r]}, Spread(), workers=2, prefetch=6), want, 8, fault_proxy)
    assert most == 3


@pytest.mark.parametrize("workers", [0, 1])
def test_close_is_prompt_while_a_read_waits_on_a_silent_server(via_proxy, fault_proxy, workers):
    _, open_ = via_proxy
    r = open_(coalesce_gap="0")
    fault_proxy.latency_ms = 30_000  # no answer within any timeout a test waits out
    loader = Loader({"x": [r]}, Spread(), workers=workers, prefetch=2)
    outcome = []

    def consume():
        try:
            next(loader)
            outcome.append("a batch")
        except Exception as e:  # noqa: BLE001 - what the consumer saw is the result
            outcome.append(e)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.5)  # the read is under way, waiting on the server
    t0 = time.monotonic()
    loader.close()
    t.join(5)
    assert time.monotonic() - t0 < 2.0
    assert not t.is_alive()
    # The consumer learns the loader is closed, or that its read was cancelled.
    assert len(outcome) == 1 and isinstance(outcome[0], (InvalidArgumentError, StorageError))
    assert "closed" in str(outcome[0]) or "cancelled" in str(outcome[0])


def test_prefetch_starts_a_gather_that_finishes_once(tmp_path, range_server, fault_proxy):
    want = write_store(tmp_path / "s", "ragged", "zstd")
    local = Ragged.open(tmp_path / "s")
    assert local.prefetch(POSITIONS) is None
    r = Ragged.open(fault_proxy.url + "/s", storage_options=HTTP_STORAGE_OPTIONS)
    fault_proxy.latency_ms = 200
    pos = POSITIONS.copy()
    t0 = time.monotonic()
    finish = r.prefetch(pos)
    assert finish is not None
    assert time.monotonic() - t0 < 0.15  # returned before any response came back
    pos[:] = 0  # the positions were copied: the caller may reuse its buffer
    batch = finish()
    got = [host(t) for t in batch.to_tensors()]
    for g, p in zip(got, POSITIONS, strict=True):
        np.testing.assert_array_equal(g, want[p])
    with pytest.raises(InvalidArgumentError, match="already finished"):
        finish()
    with pytest.raises(IndexError):
        r.prefetch(np.array([N], dtype=np.int64))
    # Cancelled while another thread waits for it: that wait ends at once.
    finish = r.prefetch(POSITIONS)
    assert finish is not None
    threading.Timer(0.05, finish.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(StorageError, match="cancelled") as e:
        finish()
    assert time.monotonic() - t0 < 0.15 and e.value.filename == r.url
    # Dropped unfinished: its requests are cancelled, and the reader goes on.
    fault_proxy.latency_ms = 0
    r.prefetch(POSITIONS)
    check(r, "ragged", want, POSITIONS)


def test_a_gather_finished_after_its_reader_closed_says_so(tmp_path, range_server, fault_proxy):
    # Was "the allocator is closed", naming neither the reader nor why.
    write_store(tmp_path / "s", "dense", "raw")
    url = fault_proxy.url + "/s"
    r = Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS)
    fault_proxy.latency_ms = 100
    finish = r.prefetch(POSITIONS)
    assert finish is not None
    r.close()
    with pytest.raises(InvalidArgumentError) as e:
        finish()
    assert str(e.value) == f"{url}: the store was closed before this gather finished"


def test_remote_readers_pickle_by_reference(tmp_path, range_server):
    want = write_store(tmp_path / "s", "ragged", "zstd")
    cache = Cache(tmp_path / "cache", max_bytes=1 << 20, block_bytes=4096)
    url = range_server.url + "/s"
    r = Ragged.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache)
    back = pickle.loads(pickle.dumps(r))
    assert back.url == url and back.header_checksum == r.header_checksum
    check(back, "ragged", want, POSITIONS)
    # The reopened reader has the same options and cache: it reads from the cache
    # the original filled.
    r[np.arange(N)]
    range_server.reset_counts()
    check(pickle.loads(pickle.dumps(r)), "ragged", want, np.arange(N))
    assert not [p for m, p, _ in range_server.log() if m == "GET" and "data-" in p]
    # A store replaced at the URL is refused on unpickling, as a local one is.
    shutil.rmtree(tmp_path / "s")
    write_store(tmp_path / "s", "ragged", "zstd", seed=1)
    with pytest.raises(ZrecordError, match="changed since the reader was pickled"):
        pickle.loads(pickle.dumps(r))


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_cache_cold_then_warm(tmp_path, range_server, kind):
    want = write_store(tmp_path / "s", kind, "zstd")
    url = range_server.url + "/s"
    cache = Cache(tmp_path / "cache", max_bytes=1 << 20, block_bytes=4096)
    with opener(kind)(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
        check(r, kind, want, np.arange(N))
        assert range_server.data_gets() != []
    range_server.reset_counts()
    with opener(kind)(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
        check(r, kind, want, np.arange(N))
        check(r, kind, want, POSITIONS)
    # Warm: the header is fetched again (it is what makes a replaced store
    # visible) and data files are only asked for their size.
    gets = [p for m, p, _ in range_server.log() if m == "GET"]
    assert gets == ["/s/header.bin"]
    # A damaged cached block is caught by the record checksums and refetched.
    blocks = [os.path.join(d, f) for d, _, fs in os.walk(cache.path) for f in fs if "data-" in d]
    assert blocks
    for b in blocks:
        with open(b, "r+b") as f:
            f.seek(0)
            byte = f.read(1)
            f.seek(0)
            f.write(bytes([byte[0] ^ 0xFF]))
    range_server.reset_counts()
    with opener(kind)(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
        check(r, kind, want, np.arange(N))
    assert range_server.data_gets() != []


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_concurrent_gathers_fetch_each_cache_block_once(tmp_path, range_server, fault_proxy, kind):
    want = write_store(tmp_path / "s", kind, "raw")
    cache = Cache(tmp_path / "cache", max_bytes=1 << 30, block_bytes=4096)
    r = opener(kind)(fault_proxy.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache)
    fault_proxy.latency_ms = 100
    range_server.reset_counts()
    # Four gathers of overlapping records begun together, all before any block
    # is cached: each block is fetched by one of them, and the others wait for it.
    batches = [np.arange(k, N, 3) for k in range(3)] + [np.arange(N)]
    pending = [r.prefetch(b) for b in batches]
    for b, finish in zip(batches, pending, strict=True):
        assert finish is not None
        got = finish()
        if kind == "dense":
            np.testing.assert_array_equal(host(got), want[b])
        else:
            for g, p in zip(got.to_tensors(), b, strict=True):
                np.testing.assert_array_equal(host(g), want[p])
    gets = [(p, rng) for m, p, rng in range_server.log() if m == "GET" and "/data-" in p]
    assert gets and len(gets) == len(set(gets))
    fetched = {}
    for path, rng in gets:
        first, last = rng.removeprefix("bytes=").split("-")
        fetched[path] = fetched.get(path, 0) + int(last) - int(first) + 1
    # Every byte of every data file, once.
    files = sorted(f for f in os.listdir(tmp_path / "s") if f.startswith("data-"))
    assert fetched == {f"/s/{f}": os.path.getsize(tmp_path / "s" / f) for f in files}


def test_cache_is_bounded(tmp_path, range_server):
    write_store(tmp_path / "s", "dense", "raw")
    cache = Cache(tmp_path / "cache", max_bytes=20_000, block_bytes=4096)
    with Dense.open(
        range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS, cache=cache
    ) as r:
        r[np.arange(N)]  # 36,000 bytes of records
    held = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(cache.path)
        for f in fs
        if not f.startswith(".tmp-")
    )
    assert 0 < held <= 20_000


def test_a_replaced_store_never_meets_stale_cache(tmp_path, range_server):
    url = range_server.url + "/s"
    cache = Cache(tmp_path / "cache", max_bytes=1 << 22, block_bytes=4096)
    old = write_store(tmp_path / "s", "dense", "raw", seed=1)
    with Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
        check(r, "dense", old, np.arange(N))
    opened_before = Dense.open(url, storage_options={**HTTP_STORAGE_OPTIONS, **FAST})
    opened_before_cached = Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache)
    shutil.rmtree(tmp_path / "s")
    new = write_store(tmp_path / "s", "dense", "raw", seed=2)
    assert not np.array_equal(old, new)
    with Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
        check(r, "dense", new, np.arange(N))
    # A reader opened on the old store reads its own store from the cache, and
    # from the network only records of the new store's bytes, which fail their
    # checksums: never the new store's values as the old one's.
    check(opened_before_cached, "dense", old, np.arange(N))
    with pytest.raises(ZrecordError, match="checksum mismatch"):
        opened_before[np.arange(N)]


@pytest.fixture
def via_proxy(tmp_path, range_server, fault_proxy):
    want = write_store(tmp_path / "s", "dense", "zstd")

    def open_(**extra):
        opts = {**HTTP_STORAGE_OPTIONS, **FAST, **extra}
        return Dense.open(fault_proxy.url + "/s", storage_options=opts)

    return want, open_


@pytest.mark.parametrize("fault", ["status", "truncate", "reset"])
def test_transient_faults_are_retried(via_proxy, fault_proxy, fault):
    want, open_ = via_proxy
    r = open_(max_concurrency="1")
    {
        "status": lambda: fault_proxy.fail_next(3, 503),
        "truncate": lambda: fault_proxy.truncate_next(3),
        "reset": lambda: fault_proxy.reset_next(3),
    }[fault]()
    fault_proxy.reset_counts()
    check(r, "dense", want, np.arange(N))
    assert fault_proxy.pending_faults() == 0
    assert fault_proxy.requests() >= 4  # the faulted attempts, then the good ones


def test_faults_past_the_retries_name_the_url(via_proxy, fault_proxy):
    want, open_ = via_proxy
    r = open_(max_concurrency="1", retries="2")
    # The index blocks come in with a first read and stay in memory, so the
    # faults below meet the data files.
    check(r, "dense", want, POSITIONS)
    # Every attempt fails: the first request to fail three times ends the read.
    fault_proxy.fail_next(1000, 500)
    with pytest.raises(StorageError, match="failed 3 times") as e:
        r[POSITIONS]
    assert e.value.filename.startswith(fault_proxy.url + "/s/data-")
    # A truncated body after the retries is the same error, never data.
    fault_proxy.clear_faults()
    fault_proxy.truncate_next(1000)
    with pytest.raises(StorageError, match="failed 3 times; the last: .*body"):
        r[POSITIONS]
    fault_proxy.clear_faults()
    check(r, "dense", want, POSITIONS)


def test_client_errors_are_not_retried(via_proxy, fault_proxy):
    _, open_ = via_proxy
    r = open_()
    fault_proxy.fail_next(1, 403)
    fault_proxy.reset_counts()
    with pytest.raises(StorageError, match="403") as e:
        r[np.array([0])]
    assert e.value.filename.endswith(".bin")
    assert fault_proxy.requests() == 1


def test_slow_responses_time_out_then_recover(via_proxy, fault_proxy):
    want, open_ = via_proxy
    r = open_(request_timeout="0.2", retries="1")
    fault_proxy.latency_ms = 500
    with pytest.raises(StorageError, match="no response began within 0.200 s"):
        r[POSITIONS]
    fault_proxy.latency_ms = 50
    check(r, "dense", want, POSITIONS)


def test_a_restarting_server_is_waited_for(tmp_path, range_server):
    want = write_store(tmp_path / "s", "dense", "zstd")
    r = Dense.open(range_server.url + "/s", storage_options={**HTTP_STORAGE_OPTIONS, **FAST})
    check(r, "dense", want, POSITIONS)
    range_server.stop()
    threading.Timer(0.15, range_server.start).start()
    check(r, "dense", want, np.arange(N))


def test_a_missing_data_file_is_a_storage_error_naming_it(tmp_path, range_server):
    write_store(tmp_path / "s", "dense", "zstd")
    r = Dense.open(range_server.url + "/s", storage_options={**HTTP_STORAGE_OPTIONS, **FAST})
    os.remove(tmp_path / "s" / "data-001.bin")
    t0 = time.monotonic()
    with pytest.raises(StorageError, match="does not exist") as e:
        r[np.arange(N)]
    assert e.value.filename == range_server.url + "/s/data-001.bin"
    assert time.monotonic() - t0 < 1.0  # not retried
    with pytest.raises(ZrecordError, match="data file is missing"):
        Dense.open(range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS)


def test_remote_verify_finds_damage(tmp_path, range_server):
    write_store(tmp_path / "s", "ragged", "zstd")
    r = Ragged.open(range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS)
    r.verify()
    p = tmp_path / "s" / "data-002.bin"
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x10
    p.write_bytes(bytes(b))
    with pytest.raises(ZrecordError, match="checksum mismatch") as e:
        r.verify()
    assert e.value.path == range_server.url + "/s/data-002.bin"


def test_open_errors(tmp_path, range_server):
    with pytest.raises(StoreNotFoundError) as e:
        Dense.open(range_server.url + "/nothing", storage_options=HTTP_STORAGE_OPTIONS)
    assert e.value.filename == range_server.url + "/nothing"
    write_store(tmp_path / "s", "dense", "raw")
    with pytest.raises(InvalidArgumentError, match='unknown storage option "aws_regoin"'):
        Dense.open("s3://b/s", storage_options={"aws_regoin": "x"})
    with pytest.raises(InvalidArgumentError, match="allow_http"):
        Dense.open(range_server.url + "/s")
    with pytest.raises(InvalidArgumentError, match="not to local paths"):
        Dense.open(tmp_path / "s", storage_options={"allow_http": True})
    with pytest.raises(InvalidArgumentError, match="retries"):
        Dense.open(
            range_server.url + "/s", storage_options={**HTTP_STORAGE_OPTIONS, "retries": "x"}
        )
    with pytest.raises(ZrecordError, match="is a Dense store"):
        Ragged.open(range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS)


def test_storage_options_take_numbers_and_booleans_and_refuse_values_by_key(tmp_path, range_server):
    want = write_store(tmp_path / "s", "dense", "raw")
    url = range_server.url + "/s"
    typed = {
        "allow_http": True,
        "retries": 2,
        "retry_backoff": 0.01,
        "request_timeout": 5,
        "max_concurrency": 4,
        "coalesce_gap": 0,
        "max_request_bytes": 4096,
        "http2_max_frame_size": 1 << 16,
    }
    with Dense.open(url, storage_options=typed) as r:
        assert np.array_equal(host(r[:]), want)
    for key, value, message in (
        ("retries", -1, "storage option retries must be a non-negative integer, got -1"),
        ("retries", 1.5, "storage option retries must be a non-negative integer, got 1.5"),
        ("max_concurrency", 0, "storage option max_concurrency must be in 1..=1024, got 0"),
        (
            "request_timeout",
            True,
            "storage option request_timeout must be a non-negative number of seconds, got True",
        ),
        (
            "retry_backoff",
            "soon",
            'storage option retry_backoff must be a non-negative number of seconds, got "soon"',
        ),
        ("from_env", 1, "storage option from_env must be True or False, got 1"),
        ("retries", 2**70, f"storage option retries is out of range, got {2**70}"),
    ):
        with pytest.raises(InvalidArgumentError) as e:
            Dense.open(url, storage_options={**typed, key: value})
        assert str(e.value) == message
    with pytest.raises(
        InvalidArgumentError, match='storage option allow_http = "maybe" is refused'
    ):
        Dense.open("https://example.com/s", storage_options={"allow_http": "maybe"})


def test_upload_refuses_an_existing_store_unless_told(tmp_path, moto_s3, s3_bucket):
    opts = moto_s3.storage_options()
    write_store(tmp_path / "a", "dense", "zstd", seed=1)
    new = write_store(tmp_path / "b", "dense", "zstd", seed=2)
    url = f"s3://{s3_bucket}/x"
    upload(tmp_path / "a", url, storage_options=opts)
    with pytest.raises(StoreExistsError):
        upload(tmp_path / "b", url, storage_options=opts)
    upload(tmp_path / "b", url, storage_options=opts, overwrite=True)
    with Dense.open(url, storage_options=opts) as r:
        check(r, "dense", new, np.arange(N))


def in_forked_child(child):
    """Runs ``child()`` in a forked child and returns what it returned (a small
    int), or 1 when it raised."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            code = child()
        finally:
            os.write(wr, bytes([code]))
            os._exit(0)
    os.close(wr)
    status = os.read(rd, 1)
    os.waitpid(pid, 0)
    return status[0] if status else 1


def test_forked_child_reads_with_its_own_runtime(tmp_path, range_server):
    want = write_store(tmp_path / "s", "dense", "zstd")
    r = Dense.open(range_server.url + "/s", storage_options=HTTP_STORAGE_OPTIONS)
    check(r, "dense", want, POSITIONS)  # the parent's runtime and client exist
    assert in_forked_child(lambda: 0 if np.array_equal(host(r[np.arange(N)]), want) else 2) == 0
    check(r, "dense", want, np.arange(N))


def test_a_forked_child_drops_and_cancels_its_parents_gathers(tmp_path, fault_proxy):
    want = write_store(tmp_path / "s", "dense", "zstd")
    r = Dense.open(fault_proxy.url + "/s", storage_options=HTTP_STORAGE_OPTIONS)
    fault_proxy.latency_ms = 300  # the parent's gathers are still in flight at the fork
    inflight = [r.prefetch(POSITIONS), r.prefetch(POSITIONS[::-1].copy())]

    def child():
        # The parent's gathers belong to the parent's runtime, which has no
        # threads here: cancelling or dropping them must neither hang nor crash,
        # and finishing one is refused.
        inflight[0].cancel()
        with pytest.raises(InvalidArgumentError, match="cannot be finished in process"):
            inflight[1]()
        inflight.clear()
        return 0 if np.array_equal(host(r[POSITIONS]), want[POSITIONS]) else 2

    assert in_forked_child(child) == 0
    for finish, pos in zip(inflight, [POSITIONS, POSITIONS[::-1]], strict=True):
        np.testing.assert_array_equal(host(finish()), want[pos])


def test_processes_share_a_cache_under_eviction(tmp_path, range_server):
    """Two processes read through one small cache directory at once: blocks are
    written, read and evicted under each other, and every read is exact."""
    want = write_store(tmp_path / "s", "ragged", "raw")
    cache = Cache(tmp_path / "cache", max_bytes=24_000, block_bytes=2048)
    url = range_server.url + "/s"
    pids = []
    for seed in (1, 2):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            code = 1
            try:
                r = Ragged.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache)
                rng = np.random.default_rng(seed)
                for _ in range(15):
                    pos = rng.integers(0, N, size=40)
                    got = r[pos].to_tensors()
                    assert all(
                        np.array_equal(host(g), want[p]) for g, p in zip(got, pos, strict=True)
                    )
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    assert [os.waitpid(p, 0)[1] for p in pids] == [0, 0]


def test_cli_info_and_verify_on_s3(tmp_path, moto_s3, s3_bucket, capsys):
    from loaderx.__main__ import main

    write_store(tmp_path / "s", "ragged", "zstd")
    url = f"s3://{s3_bucket}/s"
    upload(tmp_path / "s", url, storage_options=moto_s3.storage_options())
    opts = [a for k, v in moto_s3.storage_options().items() for a in ("-o", f"{k}={v}")]
    assert main(["info", "--json", url, *opts]) == 0
    d = json.loads(capsys.readouterr().out)["stores"][0]
    assert (d["path"], d["records"], d["kind"], d["codec"]) == (url, N, "ragged", "zstd")
    assert main(["verify", "--quiet", url, *opts]) == 0
    assert f"{url}: {N:,} records intact" in capsys.readouterr().out
    # A misspelt option is refused before any request is made.
    assert main(["info", url, *opts, "-o", "aws_regoin=x"]) == 1
    assert 'unknown storage option "aws_regoin"' in capsys.readouterr().err
