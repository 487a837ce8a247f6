"""loaderx.zrecord.concat: one store published from part stores of one schema,
records in order and byte for byte, nothing published on any failure."""

import json
import os
import shutil
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import fs_faults
import numpy as np
import pytest

from loaderx import _native, errors
from loaderx.utils import train_dict
from loaderx.zrecord import Dense, Ragged, RaggedBatch, clean, concat


@pytest.fixture(scope="module")
def zdict():
    return train_dict([np.arange(k, k + 300, dtype=np.int32) for k in range(200)], size=4096)


def host(t):
    return np.from_dlpack(t)


def dense_part(path, data, codec="raw", shards=2, dict_bytes=None):
    with Dense.create(
        path, data.dtype, data.shape[1:], codec=codec, data_shards=shards, dict_bytes=dict_bytes
    ) as w:
        w.append(data)


def ragged_part(path, recs, codec="raw", shards=2, dict_bytes=None, dtype=np.int32):
    with Ragged.create(
        path, dtype, ndim=1, codec=codec, data_shards=shards, dict_bytes=dict_bytes
    ) as w:
        if recs:
            w.append(RaggedBatch.from_records(recs))


def ragged_records(store):
    with Ragged.open(store) as r:
        return [np.array(host(t)) for t in r[:].to_tensors()] if len(r) else []


def names(d):
    return sorted(os.listdir(d))


def token_records(rng, n, seed):
    lens = rng.integers(0, 40, size=n)
    lens[seed % n] = 0  # a record of no element in every part
    return [np.arange(k, dtype=np.int32) * 7 + seed * 1000 + i for i, k in enumerate(lens)]


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_ragged_parts_concatenate_to_their_records_in_order(tmp_path, rng, codec, zdict):
    parts = [token_records(rng, n, k) for k, n in enumerate([30, 1, 17])]
    dict_bytes = zdict if codec == "zstd_dict" else None
    paths = []
    for k, recs in enumerate(parts):
        paths.append(tmp_path / f"part-{k:04d}")
        ragged_part(paths[-1], recs, codec, shards=k + 1, dict_bytes=dict_bytes)
    res = concat(paths, tmp_path / "all")
    assert res.path == str(tmp_path / "all")
    assert (res.records, res.data_files, res.linked_files, res.copied_files) == (48, 6, 6, 0)
    want = [r for p in parts for r in p]
    got = ragged_records(tmp_path / "all")
    assert len(got) == 48 and sum(r.size == 0 for r in got) == 3
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, w)
    with Ragged.open(tmp_path / "all") as r:
        r.verify()
        assert (r.codec, r.data_shards, r.header_checksum) == (codec, 6, res.header_checksum)
        if codec == "zstd_dict":
            assert r.dictionary == dict_bytes
    for p in paths:
        with Ragged.open(p) as s:
            assert s.header_checksum != res.header_checksum


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_dense_parts_concatenate_to_their_records_in_order(tmp_path, rng, codec, zdict):
    parts = [rng.standard_normal((n, 3, 4)).astype(np.float32) for n in (50, 3, 0, 21)]
    dict_bytes = zdict if codec == "zstd_dict" else None
    for k, data in enumerate(parts):
        dense_part(tmp_path / f"p{k}", data, codec, shards=4, dict_bytes=dict_bytes)
    res = concat([tmp_path / f"p{k}" for k in range(4)], str(tmp_path / "all"), verify=True)
    assert (res.records, res.data_files) == (74, 16)
    with Dense.open(tmp_path / "all") as d:
        d.verify()
        assert d.shape == (74, 3, 4) and d.dtype == np.float32
        np.testing.assert_array_equal(host(d[:]), np.concatenate(parts))


def test_zero_size_dense_records(tmp_path):
    for k, n in enumerate([4, 2]):
        dense_part(tmp_path / f"p{k}", np.zeros((n, 5, 0), np.uint16))
    res = concat([tmp_path / "p0", tmp_path / "p1"], tmp_path / "all")
    with Dense.open(tmp_path / "all") as d:
        d.verify()
        assert (res.records, d.shape) == (6, (6, 5, 0))
        assert host(d[:]).shape == (6, 5, 0)


def test_one_source_is_republished_with_its_identity(tmp_path, rng):
    data = rng.integers(0, 255, size=(40, 7), dtype=np.uint8)
    dense_part(tmp_path / "p", data, "zstd", shards=3)
    res = concat([tmp_path / "p"], tmp_path / "same")
    with Dense.open(tmp_path / "same") as d, Dense.open(tmp_path / "p") as p:
        np.testing.assert_array_equal(host(d[:]), data)
        # Same records, files and index: same header, hence the same identity.
        assert d.header_checksum == p.header_checksum == res.header_checksum
    # Hard links: the result's data files are the part's files.
    for k in range(3):
        a = os.stat(tmp_path / "same" / f"data-{k:03d}.bin")
        b = os.stat(tmp_path / "p" / f"data-{k:03d}.bin")
        assert (a.st_ino, a.st_nlink) == (b.st_ino, 2)


def test_copy_and_the_same_source_twice(tmp_path, rng):
    data = rng.integers(0, 9, size=(25, 2), dtype=np.int64)
    dense_part(tmp_path / "p", data, shards=2)
    res = concat([tmp_path / "p", tmp_path / "p"], tmp_path / "twice", copy=True)
    assert (res.linked_files, res.copied_files) == (0, 4)
    assert res.copied_bytes == 2 * data.nbytes
    with Dense.open(tmp_path / "twice") as d:
        d.verify()
        np.testing.assert_array_equal(host(d[:]), np.concatenate([data, data]))
    for k in range(4):
        assert os.stat(tmp_path / "twice" / f"data-{k:03d}.bin").st_nlink == 1


def test_a_link_across_filesystems_falls_back_to_a_copy(tmp_path):
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem (/dev/shm) beside the temporary directory")
    src = other / f"loaderx-concat-test-{os.getpid()}"
    try:
        dense_part(src, np.arange(12, dtype=np.int16).reshape(6, 2), shards=3)
        res = concat([src], tmp_path / "copied")
        assert (res.linked_files, res.copied_files, res.copied_bytes) == (0, 3, 24)
        with Dense.open(tmp_path / "copied") as d:
            d.verify()
            np.testing.assert_array_equal(host(d[:]), np.arange(12).reshape(6, 2))
    finally:
        shutil.rmtree(src, ignore_errors=True)


def schema_variants(tmp_path):
    base = np.zeros((2, 3), np.float32)
    dense_part(tmp_path / "part-0000", base)
    dense_part(tmp_path / "dtype", base.astype(np.float64))
    dense_part(tmp_path / "shape", np.zeros((2, 4), np.float32))
    dense_part(tmp_path / "ndim", np.zeros((2, 3, 1), np.float32))
    dense_part(tmp_path / "codec", base, "zstd")
    ragged_part(tmp_path / "kind", [np.zeros(3, np.float32)], dtype=np.float32)
    return {
        "dtype": "dtype float64, but",
        "shape": "item_shape [4], but",
        "ndim": "item_shape [3, 1], but",
        "codec": "codec zstd, but",
        "kind": "kind Ragged, but",
    }


def test_every_schema_mismatch_is_refused_naming_source_and_field(tmp_path):
    cases = schema_variants(tmp_path)
    before = names(tmp_path)
    base = tmp_path / "part-0000"
    for name, says in cases.items():
        with pytest.raises(errors.InvalidArgumentError) as e:
            concat([base, base, tmp_path / name], tmp_path / "out")
        msg = str(e.value)
        assert msg.startswith(f"{tmp_path / name}: {says} {base} has"), msg
        assert names(tmp_path) == before


def test_ragged_ndim_and_dictionary_mismatches(tmp_path, rng, zdict):
    ragged_part(tmp_path / "a", [np.ones(4, np.int32)])
    with Ragged.create(tmp_path / "b", np.int32, ndim=2, codec="raw") as w:
        w.append(RaggedBatch.from_records([np.ones((2, 2), np.int32)]))
    with pytest.raises(errors.InvalidArgumentError, match=r"/b: ndim 2, but .*/a has 1"):
        concat([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    recs = token_records(rng, 20, 1)
    d1 = zdict
    d2 = bytes(b ^ 1 for b in d1)
    ragged_part(tmp_path / "d1", recs, "zstd_dict", dict_bytes=d1)
    ragged_part(tmp_path / "d2", recs, "zstd_dict", dict_bytes=d2)
    with pytest.raises(errors.InvalidArgumentError, match="dictionary differs"):
        concat([tmp_path / "d1", tmp_path / "d2"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_attributes(tmp_path):
    tok = {"tokenizer": "gpt2", "vocab": [50257, None]}
    for name, attrs in [("a", tok), ("b", tok), ("c", {"tokenizer": "bpe"}), ("none", None)]:
        with Dense.create(tmp_path / name, np.uint8, (1,), codec="raw", attrs=attrs) as w:
            w.append(np.zeros((1, 1), np.uint8))
    # Without attrs=, the parts' own, which must agree.
    res = concat([tmp_path / "a", tmp_path / "b"], tmp_path / "same")
    with Dense.open(res.path) as d:
        assert d.attrs == tok
    before = names(tmp_path)
    for other in ("c", "none"):
        with pytest.raises(errors.InvalidArgumentError) as e:
            concat([tmp_path / "a", tmp_path / other], tmp_path / "out")
        assert str(e.value).startswith(f"{tmp_path / other}: its attributes differ from ")
    assert names(tmp_path) == before
    # With attrs=, exactly those, whatever the parts hold; {} for none.
    given = {"parts": 3, "source": "a, c and none"}
    res = concat([tmp_path / n for n in ("a", "c", "none")], tmp_path / "given", attrs=given)
    with Dense.open(res.path) as d:
        assert d.attrs == given
    res = concat([tmp_path / "a", tmp_path / "c"], tmp_path / "cleared", attrs={})
    with Dense.open(res.path) as d:
        assert d.attrs == {}
    assert not (tmp_path / "cleared" / "attrs.json").exists()
    with pytest.raises(errors.InvalidArgumentError):
        concat([tmp_path / "a"], tmp_path / "bad", attrs={"x": float("nan")})
    with pytest.raises(TypeError, match="dict"):
        concat([tmp_path / "a"], tmp_path / "bad", attrs=[1])  # type: ignore[arg-type]
    assert not (tmp_path / "bad").exists()


def test_arguments_are_refused_before_anything_is_made(tmp_path):
    dense_part(tmp_path / "a", np.zeros((3, 1), np.uint8))
    dense_part(tmp_path / "wide", np.zeros((3, 1), np.uint8), shards=200)
    before = names(tmp_path)
    with pytest.raises(errors.InvalidArgumentError, match="at least one source"):
        concat([], tmp_path / "out")
    with pytest.raises(TypeError, match="not one path"):
        concat(str(tmp_path / "a"), tmp_path / "out")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="verify must be a bool"):
        concat([tmp_path / "a"], tmp_path / "out", verify=1)  # type: ignore[arg-type]
    wides = [tmp_path / "wide"] * (_native.MAX_DATA_FILES // 200 + 1)
    with pytest.raises(
        errors.InvalidArgumentError,
        match=f"{200 * len(wides)} data files.*at most {_native.MAX_DATA_FILES}",
    ):
        concat(wides, tmp_path / "out")
    with pytest.raises(errors.StoreExistsError):
        concat([tmp_path / "a"], tmp_path / "wide")
    with pytest.raises(errors.StoreNotFoundError):
        concat([tmp_path / "a", tmp_path / "missing"], tmp_path / "out")
    assert names(tmp_path) == before


def test_more_than_255_data_files_make_a_version_3_store(tmp_path):
    dense_part(tmp_path / "wide", np.arange(6, dtype=np.int16).reshape(3, 2), shards=200)
    dense_part(tmp_path / "one", np.full((1, 2), -7, np.int16), shards=1)
    at_most = concat([tmp_path / "wide"] + [tmp_path / "one"] * 55, tmp_path / "v2")
    assert (at_most.records, at_most.data_files) == (58, 255)
    with Dense.open(at_most.path) as ds:
        assert ds.format_version == _native.FORMAT_VERSION == 2
    result = concat([tmp_path / "one", tmp_path / "wide", tmp_path / "wide"], tmp_path / "v3")
    assert (result.records, result.data_files) == (7, 401)
    with Dense.open(result.path) as ds:
        assert ds.format_version == _native.NEWEST_FORMAT_VERSION == 3
        assert ds.data_shards == 401
        ds.verify()
        got = np.from_dlpack(ds[np.arange(7)])
    wide = np.arange(6).reshape(3, 2)
    want = np.concatenate([np.full((1, 2), -7), wide, wide]).astype(np.int16)
    np.testing.assert_array_equal(got, want)


def test_nothing_is_published_on_a_failure_part_way(tmp_path, rng):
    for k in range(3):
        dense_part(tmp_path / f"p{k}", rng.standard_normal((30, 8)), "zstd", shards=2)
    parts = [tmp_path / f"p{k}" for k in range(3)]
    before = names(tmp_path)

    class Stop(Exception):
        pass

    seen = []

    def stop(event):
        seen.append((event.task, event.unit, event.done, event.total, event.finished))
        if event.done >= 60:
            raise Stop

    with pytest.raises(Stop):
        concat(parts, tmp_path / "out", progress=stop)
    task = f"concat {tmp_path / 'out'}"
    assert seen == [(task, "records", d, 90, False) for d in (0, 30, 60)]
    assert names(tmp_path) == before

    def delete(event):
        if event.done == 30:
            os.remove(tmp_path / "p2" / "data-000.bin")

    with pytest.raises(errors.StoreNotFoundError, match="p2/data-000.bin"):
        concat(parts, tmp_path / "out", progress=delete)
    assert names(tmp_path) == before


def test_a_damaged_source_publishes_nothing(tmp_path):
    dense_part(tmp_path / "p0", np.arange(40, dtype=np.int32).reshape(10, 4), shards=1)
    dense_part(tmp_path / "p1", np.arange(40, dtype=np.int32).reshape(10, 4), shards=1)
    data = tmp_path / "p1" / "data-000.bin"
    raw = bytearray(data.read_bytes())
    raw[16 * 3 + 1] ^= 0xFF  # record 3
    data.write_bytes(bytes(raw))
    before = names(tmp_path)
    with pytest.raises(errors.ZrecordError) as e:
        concat([tmp_path / "p0", tmp_path / "p1"], tmp_path / "out", verify=True)
    assert (e.value.record, Path(e.value.path)) == (3, data)
    assert names(tmp_path) == before
    # Without verify=True the payload is not read: the damage is published as it
    # is, and verify() on the result finds it at the record's new position.
    concat([tmp_path / "p0", tmp_path / "p1"], tmp_path / "out")
    with Dense.open(tmp_path / "out") as d, pytest.raises(errors.ZrecordError) as e:
        d.verify()
    assert e.value.record == 13
    header = tmp_path / "p0" / "header.bin"
    raw = bytearray(header.read_bytes())
    raw[30] ^= 1
    header.write_bytes(bytes(raw))
    with pytest.raises(errors.ZrecordError, match="header checksum mismatch"):
        concat([tmp_path / "p0"], tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


# ---- faults injected into a child process (tests/support/fs_faults.c) ----------------

CONCAT = textwrap.dedent(
    """
    import json, sys
    from loaderx.zrecord import concat

    try:
        r = concat(sys.argv[2:], sys.argv[1])
        out = {"raised": None, "linked": r.linked_files, "copied": r.copied_files,
               "copied_bytes": r.copied_bytes}
    except Exception as e:
        out = {"raised": type(e).__name__, "errno": getattr(e, "errno", None),
               "message": str(e)}
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return fs_faults.build(tmp_path_factory)


@pytest.fixture
def two_parts(tmp_path):
    parts = [np.arange(60, dtype=np.int64).reshape(20, 3) + 100 * k for k in range(2)]
    for k, data in enumerate(parts):
        dense_part(tmp_path / f"p{k}", data, "zstd", shards=2)
    return [str(tmp_path / f"p{k}") for k in range(2)], np.concatenate(parts)


def run_concat(faults, fault, dest, parts, at=1):
    p = fs_faults.run(faults, fault, CONCAT, str(dest), *parts, at=at)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_refused_link_is_a_copy(faults, tmp_path, two_parts):
    parts, want = two_parts
    out = run_concat(faults, "link_exdev", tmp_path / "out", parts)
    sizes = sum(os.path.getsize(f"{p}/data-{k:03d}.bin") for p in parts for k in range(2))
    assert out == {"raised": None, "linked": 0, "copied": 4, "copied_bytes": sizes}
    with Dense.open(tmp_path / "out") as d:
        d.verify()
        np.testing.assert_array_equal(host(d[:]), want)


def test_a_failed_link_publishes_nothing(faults, tmp_path, two_parts):
    parts, _ = two_parts
    before = names(tmp_path)
    out = run_concat(faults, "link_eio", tmp_path / "out", parts)
    assert (out["raised"], out["errno"]) == ("StorageError", 5)
    assert f"{parts[0]}/data-000.bin: Input/output error" in out["message"]
    assert names(tmp_path) == before


def test_publishing_faults_are_the_writers(faults, tmp_path, two_parts):
    parts, want = two_parts
    before = names(tmp_path)
    out = run_concat(faults, "fsync_dir_before_rename", tmp_path / "out", parts)
    assert (out["raised"], out["errno"]) == ("StorageError", 5)
    assert names(tmp_path) == before
    out = run_concat(faults, "fsync_dir_after_rename", tmp_path / "out", parts)
    assert (out["raised"], out["errno"]) == ("PublishedNotDurableError", 5)
    assert f"was published at {tmp_path / 'out'}" in out["message"]
    assert names(tmp_path) == sorted([*before, "out"])
    with Dense.open(tmp_path / "out") as d:
        d.verify()
        np.testing.assert_array_equal(host(d[:]), want)


def test_a_concat_killed_before_publishing_leaves_only_a_build_directory(
    faults, tmp_path, two_parts
):
    parts, _ = two_parts
    before = names(tmp_path)
    p = fs_faults.run(faults, "kill_at_rename", CONCAT, str(tmp_path / "out"), *parts)
    assert p.returncode == -signal.SIGKILL
    (left,) = set(names(tmp_path)) - set(before)
    assert left.startswith(".out.tmp-")
    with pytest.raises(errors.ZrecordError, match="unpublished build directory"):
        Dense.open(tmp_path / left)
    assert clean(tmp_path) == [str(tmp_path / left)]
    assert names(tmp_path) == before
    for part in parts:  # the parts lost nothing with the build's links
        with Dense.open(part) as d:
            d.verify()


def test_progress_events_end_with_a_finished_one(tmp_path, capfd):
    for k in range(2):
        dense_part(tmp_path / f"p{k}", np.zeros((5 + k, 2), np.int8))
    events = []
    concat([tmp_path / "p0", tmp_path / "p1"], tmp_path / "out", progress=events.append)
    assert [(e.done, e.total, e.finished) for e in events] == [
        (0, 11, False),
        (5, 11, False),
        (11, 11, False),
        (11, 11, True),
    ]
    with pytest.raises(TypeError, match="progress must be"):
        concat([tmp_path / "p0"], tmp_path / "other", progress=3)  # type: ignore[arg-type]
    # True reports only to a terminal; under pytest stderr is not one.
    concat([tmp_path / "p0"], tmp_path / "quiet", progress=True)
    assert capfd.readouterr().err == ""


def test_the_gil_is_released_while_data_files_are_copied(tmp_path):
    # While the first part (64 MiB) is copied, another Python thread must keep
    # running. Were the GIL held, it could run only while a progress callback
    # runs, between two steps of the call.
    dense_part(tmp_path / "big", np.zeros((1024, 16384), np.int32), shards=1)
    dense_part(tmp_path / "small", np.zeros((1, 16384), np.int32), shards=1)
    beats: list[float] = []
    events: list[float] = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            beats.append(time.perf_counter())

    spinner = threading.Thread(target=spin)
    interval = sys.getswitchinterval()
    # A callback may hand the GIL to the spinner for one switch interval around
    # its event; a short one keeps that well inside the first quarter of the copy.
    sys.setswitchinterval(1e-4)
    spinner.start()
    try:
        concat(
            [tmp_path / "big", tmp_path / "small"],
            tmp_path / "out",
            copy=True,
            progress=lambda e: events.append(time.perf_counter()),
        )
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(interval)
    # Events: start (0 records), after the big part, after the small one, finished.
    # Only the middle half of the copy counts.
    assert len(events) == 4
    t0, t1 = events[0], events[1]
    middle = (t0 + (t1 - t0) / 4, t1 - (t1 - t0) / 4)
    assert t1 - t0 > 0.008, "the copy was too quick to tell"
    assert any(middle[0] < t < middle[1] for t in beats), (t1 - t0, len(beats))
