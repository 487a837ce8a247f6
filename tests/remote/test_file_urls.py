"""file:// stores: a FIFO or a directory where a store file should be is refused
at once, as a local store refuses it; client durations take seconds; Cache
limits and text that is not Unicode are refused naming them."""

import os

import numpy as np
import pytest
from fifo_unblock import Unblock
from remote_servers import HTTP_STORAGE_OPTIONS, RangeServer

from loaderx import _native
from loaderx.errors import InvalidArgumentError, StoreNotFoundError, ZrecordError
from loaderx.zrecord import Cache, Dense, upload


def make_store(path):
    with Dense.create(path, np.int8, (), codec="zstd", data_shards=1, attrs={"a": 1}) as w:
        w.append(np.arange(10, dtype=np.int8))
    return path


@pytest.mark.parametrize(
    "victim",
    [
        _native.HEADER_FILE,
        _native.INDEX_FILE,
        _native.INDEX_SUMS_FILE,
        _native.ATTRS_FILE,
        _native.data_file_name(0),
    ],
)
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_file_url_store_with_a_fifo_or_directory_for_a_file_is_refused_at_once(
    tmp_path, victim, kind
):
    store = make_store(tmp_path / "s")
    path = store / victim
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    url = store.as_uri()
    with Unblock(path) as u, pytest.raises(ZrecordError) as e:
        with Dense.open(url, storage_options={"retries": 0}) as r:
            r[:]  # a data file is read by the first gather
    assert not u.unblocked and u.elapsed < 5
    assert str(e.value) == (
        f"{url}/{victim}: not a regular file (a store holds only regular files)"
    )
    # The local reader says the same of the same store.
    with pytest.raises(ZrecordError, match="is not a regular file"):
        Dense.open(store)


@pytest.mark.parametrize("timeout", [30, 2.5, "30", "1m 30s"])
def test_client_durations_take_seconds_or_duration_strings(tmp_path, timeout):
    # timeout=30 was passed on as "30", which object_store cannot read.
    make_store(tmp_path / "s")
    server = RangeServer(tmp_path)
    server.start()
    try:
        options = {**HTTP_STORAGE_OPTIONS, "timeout": timeout, "connect_timeout": 5}
        with Dense.open(f"{server.url}/s", storage_options=options) as r:
            assert np.from_dlpack(r[:]).tolist() == list(range(10))
    finally:
        server.stop()


def test_client_durations_refuse_zero_and_say_how_to_write_them():
    # timeout=0 was passed on as "0", which failed every request at once.
    url = "http://127.0.0.1:9/s"
    for value, shown in [(0, "0"), (0.0, "0.0"), ("0", '"0"'), ("0s", '"0s"')]:
        with pytest.raises(InvalidArgumentError) as e:
            Dense.open(url, storage_options={"allow_http": True, "timeout": value})
        assert str(e.value) == f"storage option timeout must be positive, got {shown}"
    with pytest.raises(InvalidArgumentError) as e:
        Dense.open(url, storage_options={"allow_http": True, "connect_timeout": "soon"})
    assert str(e.value) == (
        "storage option connect_timeout must be a number of seconds or a duration such as "
        '"30s" or "1m 30s", got "soon"'
    )


@pytest.mark.parametrize(
    "key",
    [
        "timeout",
        "read_timeout",
        "pool_idle_timeout",
        "deadline",
        "retry_backoff",
        "request_timeout",
    ],
)
@pytest.mark.parametrize(
    "value, shown",
    [(9.3e18, "9.3e+18"), (2**63 - 1, str(2**63 - 1)), ("1000000001", '"1000000001"')],
)
def test_durations_past_a_billion_seconds_are_refused_naming_them(key, value, shown):
    # read_timeout=9.3e18 reached the HTTP client, which panicked adding it to
    # the time of a request ("overflow when adding duration to instant").
    url = "http://127.0.0.1:9/s"
    with pytest.raises(InvalidArgumentError) as e:
        Dense.open(url, storage_options={"allow_http": True, key: value})
    assert str(e.value) == (
        f"storage option {key} must be at most 1000000000 seconds (about 31 years), got {shown}"
    )


def test_a_billion_seconds_is_a_duration_taken(tmp_path):
    make_store(tmp_path / "s")
    with RangeServer(tmp_path) as server:
        options = {**HTTP_STORAGE_OPTIONS, "read_timeout": 10**9, "pool_idle_timeout": "1e9"}
        with Dense.open(f"{server.url}/s", storage_options=options) as r:
            assert np.from_dlpack(r[:]).tolist() == list(range(10))


@pytest.mark.parametrize(
    "max_bytes, block_bytes, message",
    [
        (2**64, 1, f"max_bytes must be in 0..{2**64 - 1}, got {2**64}"),
        (1, 2**64, f"block_bytes must be in 1..{2**64 - 1}, got {2**64}"),
    ],
)
def test_cache_limits_beyond_64_bits_are_refused_by_cache(
    tmp_path, max_bytes, block_bytes, message
):
    # They were an OverflowError when the store was opened.
    with pytest.raises(InvalidArgumentError) as e:
        Cache(tmp_path / "c", max_bytes=max_bytes, block_bytes=block_bytes)
    assert str(e.value) == message
    assert Cache(tmp_path / "c", max_bytes=2**64 - 1).max_bytes == 2**64 - 1
    assert os.listdir(tmp_path) == []


def test_text_that_is_not_unicode_is_refused_naming_it(tmp_path):
    # Each was a UnicodeEncodeError from the bindings.
    store = make_store(tmp_path / "s")
    with pytest.raises(InvalidArgumentError) as e:
        Dense.open("s3://bucket/\udcffkey")
    assert str(e.value) == (
        "'s3://bucket/\\udcffkey': a URL is text, and this one holds a lone surrogate at "
        "position 12"
    )
    with pytest.raises(InvalidArgumentError, match="a URL is text"):
        upload(store, "file:///nowhere/\udcffx")
    with pytest.raises(InvalidArgumentError) as e:
        Dense.open(store.as_uri(), storage_options={"region": "\udcff"})
    assert str(e.value) == "storage option region holds a lone surrogate, which UTF-8 cannot encode"
    # A local path of undecodable bytes is a path like any other.
    with pytest.raises(StoreNotFoundError):
        Dense.open(tmp_path / "\udcff")
    odd = tmp_path / "\udcfe"
    make_store(odd)
    with Dense.open(odd) as r:
        assert np.from_dlpack(r[:]).tolist() == list(range(10))
    assert sorted(os.listdir(os.fsencode(tmp_path))) == [b"s", b"\xfe"]
