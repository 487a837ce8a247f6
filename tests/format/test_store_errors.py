"""Schema rules, lifecycle errors, atomic publish and corruption detection."""

import io
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import DLPackProducer, host
from loaderx.zrecord import Dense, Ragged, RaggedBatch, ZrecordError

REFUSED = {
    "structured": np.dtype([("a", np.int32), ("b", np.float32)]),
    "subarray": np.dtype((np.int32, (2,))),
    "object": np.dtype(object),
    "string": np.dtype("U4"),
    "bytes": np.dtype("S4"),
    "datetime": np.dtype("datetime64[s]"),
    "timedelta": np.dtype("timedelta64[s]"),
    "non-native": np.dtype(np.int32).newbyteorder("S"),
    "zero itemsize": np.dtype("V0"),
    "float128": np.dtype(np.longdouble),
    "metadata": np.dtype(np.int32, metadata={"unit": "m"}),
}
WHY = {
    "structured": "structured",
    "subarray": "subarray",
    "object": "object",
    "string": "string",
    "bytes": "string",
    "datetime": "datetime",
    "timedelta": "datetime",
    "non-native": "native-endian",
    "zero itemsize": "zero itemsize|string",
    "float128": "DLPack",
    "metadata": "metadata",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_dtypes_say_why(tmp_path, name):
    with pytest.raises(ValueError, match=WHY[name]):
        Dense.create(tmp_path / "s", REFUSED[name], (2,), codec="raw")
    with pytest.raises(ValueError, match=WHY[name]):
        Ragged.create(tmp_path / "r", REFUSED[name], ndim=1, codec="raw")
    assert not os.path.exists(tmp_path / "s")


def test_create_argument_errors(tmp_path):
    p = tmp_path / "s"
    with pytest.raises(ValueError, match="codec must be one of"):
        Dense.create(p, np.int32, (2,), codec="lz4")
    with pytest.raises(TypeError):
        Dense.create(p, np.int32, (2,))  # codec is required
    with pytest.raises(ValueError, match="data_shards must be in 1..255, got 0"):
        Dense.create(p, np.int32, (2,), codec="raw", data_shards=0)
    with pytest.raises(ValueError, match="data_shards must be in 1..255, got 256"):
        Dense.create(p, np.int32, (2,), codec="raw", data_shards=256)
    with pytest.raises(TypeError, match="data_shards must be an integer"):
        Dense.create(p, np.int32, (2,), codec="raw", data_shards=2.0)
    with pytest.raises(ValueError, match="item_shape dimension must be >= 0, got -1"):
        Dense.create(p, np.int32, (2, -1), codec="raw")
    with pytest.raises(TypeError, match="item_shape must be a tuple of ints"):
        Dense.create(p, np.int32, None, codec="raw")
    with pytest.raises(ValueError, match="dtype 'nope' is not a NumPy dtype"):
        Dense.create(p, "nope", (2,), codec="raw")
    with pytest.raises(ValueError) as info:
        Dense.create(p, object(), (2,), codec="raw")
    # Named by its type: the object's repr was in the message, twice.
    assert str(info.value) == (
        "dtype must be a NumPy dtype, a type such as np.float32 or a name such as 'float32', "
        "got object"
    )
    with pytest.raises(ValueError, match="only used by codec 'zstd_dict'"):
        Dense.create(p, np.int32, (2,), codec="zstd", dict_bytes=b"abc")
    with pytest.raises(ValueError, match="Dense with item_shape=\\(\\)"):
        Ragged.create(p, np.int32, ndim=0, codec="raw")
    assert not os.path.exists(p)


def test_create_on_existing_path_is_refused_before_any_work(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"x")
    for name in ("dir", "file"):
        with pytest.raises(FileExistsError, match="already exists"):
            Dense.create(tmp_path / name, np.int32, (2,), codec="raw")
    assert sorted(os.listdir(tmp_path)) == ["dir", "file"]


def test_append_never_coerces(tmp_path):
    with Dense.create(tmp_path / "s", np.float32, (2, 3), codec="raw") as w:
        with pytest.raises(ValueError, match="expected dtype float32, got float64"):
            w.append(np.zeros((4, 2, 3)))
        with pytest.raises(ValueError, match=r"expected shape \(n, 2, 3\), got \(4, 3, 2\)"):
            w.append(np.zeros((4, 3, 2), np.float32))
        with pytest.raises(ValueError, match=r"expected shape \(n, 2, 3\), got \(2, 3\)"):
            w.append(np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match="C-contiguous"):
            w.append(np.zeros((4, 2, 6), np.float32)[:, :, ::2])
        with pytest.raises(TypeError, match="does not coerce"):
            w.append([[[0.0] * 3] * 2])
        w.append(np.ones((1, 2, 3), np.float32))
        assert len(w) == 1
    with Dense.open(tmp_path / "s") as ds:
        assert len(ds) == 1


def test_append_accepts_dltensor_and_dlpack_producers(tmp_path, rng):
    data = rng.integers(0, 255, (9, 4), dtype=np.uint8)
    with Dense.create(tmp_path / "a", np.uint8, (4,), codec="zstd") as w:
        w.append(data)

    with (
        Dense.open(tmp_path / "a") as s,
        Dense.create(tmp_path / "b", s.dtype, s.item_shape, codec="raw") as d,
    ):
        d.append(s[:])
        d.append(DLPackProducer(data[:2]))
    with Dense.open(tmp_path / "b") as b:
        assert np.array_equal(host(b[:]), np.concatenate([data, data[:2]]))


def test_reader_and_writer_modes(tmp_path):
    w = Dense.create(tmp_path / "s", np.int32, (1,), codec="raw")
    with pytest.raises(io.UnsupportedOperation, match="a writer cannot be read"):
        w[0]
    with pytest.raises(TypeError, match="a writer cannot be read"):
        iter(w)
    w.append(np.zeros((2, 1), np.int32))
    w.close()
    w.close()  # idempotent
    with pytest.raises(ValueError, match="closed writer cannot append"):
        w.append(np.zeros((2, 1), np.int32))
    r = Dense.open(tmp_path / "s")
    with pytest.raises(io.UnsupportedOperation, match="opened for reading"):
        r.append(np.zeros((2, 1), np.int32))
    r.close()
    with pytest.raises(ValueError, match="the store is closed"):
        r[0]
    with pytest.raises(ValueError, match="the store is closed"):
        len(r)


def test_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such store"):
        Dense.open(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ZrecordError, match="header.bin: missing"):
        Dense.open(tmp_path / "empty")
    with Dense.create(tmp_path / "d", np.int32, (1,), codec="raw") as w:
        w.append(np.zeros((1, 1), np.int32))
    with pytest.raises(ZrecordError, match="is a Dense store; open it with Dense.open"):
        Ragged.open(tmp_path / "d")
    with Ragged.create(tmp_path / "r", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records([np.zeros(2, np.int32)]))
    with pytest.raises(ZrecordError, match="is a Ragged store; open it with Ragged.open"):
        Dense.open(tmp_path / "r")


def test_exception_inside_with_publishes_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with Dense.create(tmp_path / "s", np.int32, (1,), codec="zstd") as w:
            w.append(np.zeros((3, 1), np.int32))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_unclosed_writer_publishes_nothing(tmp_path):
    w = Dense.create(tmp_path / "s", np.int32, (1,), codec="raw")
    w.append(np.zeros((3, 1), np.int32))
    del w
    assert os.listdir(tmp_path) == []


def test_killed_writer_leaves_nothing_that_opens(tmp_path):
    script = textwrap.dedent(
        f"""
        import numpy as np, os, sys
        from loaderx.zrecord import Dense
        w = Dense.create({str(tmp_path / "s")!r}, np.uint8, (1 << 16,), codec="zstd")
        data = np.random.default_rng(0).integers(0, 255, (256, 1 << 16), dtype=np.uint8)
        w.append(data[:8])
        print("appended", flush=True)
        while True:
            w.append(data)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"appended"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not os.path.exists(tmp_path / "s")
    with pytest.raises(FileNotFoundError):
        Dense.open(tmp_path / "s")
    leftovers = os.listdir(tmp_path)
    assert all(name.startswith(".s.tmp-") for name in leftovers)


def make_store(path, codec="zstd"):
    data = np.arange(40 * 16, dtype=np.int64).reshape(40, 16)
    with Dense.create(path, np.int64, (16,), codec=codec, data_shards=2) as w:
        w.append(data)
    return data


@pytest.mark.parametrize("name", ["header.bin", "index.bin"])
def test_flipped_metadata_byte_fails_to_open(tmp_path, name):
    make_store(tmp_path / "s")
    f = tmp_path / "s" / name
    raw = bytearray(f.read_bytes())
    for at in range(0, len(raw), max(1, len(raw) // 23)):
        b = raw.copy()
        b[at] ^= 0x10
        f.write_bytes(bytes(b))
        with pytest.raises(ZrecordError, match=name):
            Dense.open(tmp_path / "s")
    f.write_bytes(bytes(raw))
    Dense.open(tmp_path / "s").close()


@pytest.mark.parametrize("name", ["header.bin", "index.bin", "data-000.bin", "data-001.bin"])
def test_truncated_or_extended_file_fails_to_open(tmp_path, name):
    make_store(tmp_path / "s")
    f = tmp_path / "s" / name
    raw = f.read_bytes()
    for variant in (raw[:-1], raw[: len(raw) // 2], raw + b"\0"):
        f.write_bytes(variant)
        with pytest.raises(ZrecordError, match=name):
            Dense.open(tmp_path / "s")
    f.write_bytes(raw)


def test_missing_data_file_fails_to_open(tmp_path):
    make_store(tmp_path / "s")
    os.remove(tmp_path / "s" / "data-001.bin")
    with pytest.raises(ZrecordError, match="data-001.bin.*missing"):
        Dense.open(tmp_path / "s")


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_flipped_payload_byte_is_found_by_verify(tmp_path, codec):
    data = make_store(tmp_path / "s", codec)
    with Dense.open(tmp_path / "s") as ds:
        ds.verify()
    f = tmp_path / "s" / "data-001.bin"
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    f.write_bytes(bytes(raw))
    with Dense.open(tmp_path / "s") as ds:
        with pytest.raises(ZrecordError, match=r"data-001.bin: record \d+: checksum mismatch"):
            ds.verify()
        if codec == "raw":  # raw reads do not re-hash; verify() is the check
            assert not np.array_equal(host(ds[:]), data)


def test_create_makes_parent_directories(tmp_path):
    with Dense.create(tmp_path / "mnist" / "x", np.uint8, (2, 2), codec="zstd") as w:
        w.append(np.zeros((3, 2, 2), np.uint8))
    with Dense.open(str(tmp_path / "mnist" / "x")) as ds:
        assert len(ds) == 3 and ds.path == str(tmp_path / "mnist" / "x")


def test_a_negative_position_is_out_of_range_however_it_is_given(tmp_path):
    """`ds[-1]` is loaderx's OutOfRangeError; a negative position in a list, a
    tuple or an integer array is the same error with the same message, so that
    `except LoaderxError` catches every one."""
    from loaderx.errors import LoaderxError, OutOfRangeError

    with Dense.create(tmp_path / "d", np.int32, (2,), codec="raw") as w:
        w.append(np.arange(10, dtype=np.int32).reshape(5, 2))
    with Ragged.create(tmp_path / "r", np.int16, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records([np.arange(n, dtype=np.int16) for n in range(5)]))
    for store in (Dense.open(tmp_path / "d"), Ragged.open(tmp_path / "r")):
        with store:
            for key, shown in (
                (-1, -1),
                ([-1], -1),
                ((0, -2), -2),
                (np.array([-1]), -1),
                (np.array([3, -4], dtype=np.int32), -4),
                (np.array([1, -5], dtype=np.int64), -5),
            ):
                with pytest.raises(OutOfRangeError) as info:
                    store[key]
                assert isinstance(info.value, LoaderxError)
                assert str(info.value) == (
                    f"position {shown} is out of range for a store of 5 records (0..4)"
                ), key
