"""Dense store: round trips, indexing, DLPack export, schema rules and errors."""

import ctypes
import os
import threading

import numpy as np
import pytest

from conftest import host
from loaderx.zrecord import Dense, DLTensor

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]


def sample(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


def build(path, data, codec="raw", data_shards=4):
    with Dense.create(path, data.dtype, data.shape[1:], codec=codec, data_shards=data_shards) as w:
        w.append(data)
    return Dense.open(path)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_round_trips_exactly(tmp_path, rng, dtype, codec):
    data = sample(rng, dtype, (37, 3, 5))
    with build(tmp_path / "s", data, codec) as ds:
        got = host(ds[:])
        assert got.dtype == data.dtype
        assert got.tobytes() == data.tobytes()
        assert ds.dtype == np.dtype(dtype)


@pytest.mark.parametrize("item_shape", [(), (1,), (3, 224, 224)])
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_item_shapes(tmp_path, rng, item_shape, codec):
    data = sample(rng, np.uint8 if item_shape else np.float64, (5, *item_shape))
    with build(tmp_path / "s", data, codec) as ds:
        assert ds.item_shape == item_shape
        assert len(ds) == 5
        for i in range(5):
            rec = ds[i]
            assert rec.shape == item_shape
            assert np.array_equal(host(rec), data[i])
        assert np.array_equal(host(ds[[4, 0, 4]]), data[[4, 0, 4]])


@pytest.mark.parametrize("n", [0, 1, 10_000])
@pytest.mark.parametrize("shards", [1, 4, 255])
def test_record_counts_and_shards(tmp_path, rng, n, shards):
    data = rng.integers(0, 1000, (n, 7), dtype=np.int32)
    with build(tmp_path / "s", data, "zstd", shards) as ds:
        assert len(ds) == n
        assert ds.data_shards == shards
        assert host(ds[:]).shape == (n, 7)
        assert np.array_equal(host(ds[:]), data)
        if n:
            idx = rng.integers(0, n, 300)
            assert np.array_equal(host(ds[idx]), data[idx])
    files = sorted(os.listdir(tmp_path / "s"))
    assert files == sorted(
        ["header.bin", "index.bin", "index.sum"] + [f"data-{s:03d}.bin" for s in range(shards)]
    )


def test_records_larger_than_one_mib(tmp_path, rng):
    data = rng.integers(0, 255, (6, 3, 512, 700), dtype=np.uint8)  # 1.05 MB each
    for codec in ("raw", "zstd"):
        with build(tmp_path / codec, data, codec) as ds:
            assert np.array_equal(host(ds[[5, 0, 3, 3]]), data[[5, 0, 3, 3]])


def test_several_appends_extend_the_sequence(tmp_path, rng):
    parts = [rng.integers(0, 9, (k, 4), dtype=np.int16) for k in (3, 0, 11, 1)]
    with Dense.create(tmp_path / "s", np.int16, (4,), codec="zstd") as w:
        for i, p in enumerate(parts):
            w.append(p)
            assert len(w) == sum(len(q) for q in parts[: i + 1])
    with Dense.open(tmp_path / "s") as ds:
        assert np.array_equal(host(ds[:]), np.concatenate(parts))


def test_indexing_forms(tmp_path, rng):
    data = rng.integers(0, 100, (20, 2), dtype=np.int64)
    with build(tmp_path / "s", data) as ds:
        assert np.array_equal(host(ds[3]), data[3])
        assert np.array_equal(host(ds[np.int32(3)]), data[3])
        assert np.array_equal(host(ds[0, 5, 2]), data[[0, 5, 2]])
        assert np.array_equal(host(ds[[7, 7, 1]]), data[[7, 7, 1]])
        assert np.array_equal(host(ds[(19, 0)]), data[[19, 0]])
        for dt in (np.int8, np.int32, np.int64, np.uint16, np.uint64):
            assert np.array_equal(host(ds[np.array([2, 9, 2], dtype=dt)]), data[[2, 9, 2]])
        for s in (
            slice(None),
            slice(2, 9),
            slice(None, None, 3),
            slice(18, 2, -4),
            slice(-3, None),
            slice(5, 5),
            slice(100, 200),
        ):
            assert np.array_equal(host(ds[s]), data[s]), s
        assert np.array_equal(host(ds[range(1, 10, 4)]), data[1:10:4])
        for empty in ([], (), np.array([], dtype=np.int64), slice(3, 3)):
            t = ds[empty]
            assert t.shape == (0, 2)
        assert [host(r).tolist() for r in ds] == data.tolist()
        assert np.array_equal(host(ds.gather(np.array([4, 1], dtype=np.uint64))), data[[4, 1]])


def test_out_of_range_and_bad_positions(tmp_path):
    data = np.arange(10, dtype=np.int32).reshape(5, 2)
    with build(tmp_path / "s", data) as ds:
        for bad in (5, -1, [0, 5], np.array([1, -2]), np.array([7], dtype=np.uint64)):
            with pytest.raises(IndexError, match="out of range|negative"):
                ds[bad]
        for huge in (2**63, 2**64, -(2**63) - 1, 10**30):
            with pytest.raises(IndexError, match=f"position {huge} is out of range"):
                ds[[0, huge]]
            with pytest.raises(IndexError, match=f"position {huge} is out of range"):
                ds[huge]
        with pytest.raises(TypeError, match="integers"):
            ds[[1.0, 2.0]]
        with pytest.raises(TypeError, match="integers"):
            ds[np.array([True, False, True, False, True])]
        with pytest.raises(TypeError):
            ds["a"]
        with pytest.raises(TypeError):
            ds[True]
        with pytest.raises(ValueError, match="one-dimensional"):
            ds[np.zeros((2, 2), dtype=np.int64)]


def test_dlpack_shares_memory_and_is_writable(tmp_path):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with build(tmp_path / "s", data) as ds:
        t = ds[[0, 1]]
        a, b = np.from_dlpack(t), np.from_dlpack(t)
        assert np.shares_memory(a, b)
        a[1, 2] = -7.0
        assert b[1, 2] == -7.0
        assert a.flags.writeable
        assert a.__array_interface__["data"][0] % 64 == 0
        assert host(ds[1])[2] == 6.0  # the store itself is untouched


def test_dltensor_attributes(tmp_path):
    data = np.zeros((4, 2, 3), dtype=np.complex64)
    with build(tmp_path / "s", data) as ds:
        t = ds[[0, 2]]
        assert isinstance(t, DLTensor)
        assert t.shape == (2, 2, 3)
        assert t.dtype == np.complex64
        assert t.ndim == 3
        assert t.nbytes == 2 * 2 * 3 * 8
        assert t.device == (1, 0)
        assert t.__dlpack_device__() == (1, 0)
        assert len(t) == 2
        assert not hasattr(t, "__array__")
        assert not hasattr(t, "to_numpy")
        assert repr(t) == "DLTensor(shape=(2, 2, 3), dtype=complex64, device=cpu)"


def capsule_name(cap):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(cap)


def test_versioned_and_legacy_capsules(tmp_path):
    data = np.arange(6, dtype=np.int16).reshape(3, 2)
    with build(tmp_path / "s", data) as ds:
        t = ds[:]
        assert capsule_name(t.__dlpack__()) == b"dltensor"
        assert capsule_name(t.__dlpack__(max_version=(0, 8))) == b"dltensor"
        assert capsule_name(t.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
        assert capsule_name(t.__dlpack__(max_version=(1, 3), stream=None)) == b"dltensor_versioned"
        assert t.__dlpack__(dl_device=(1, 0)) is not None
        with pytest.raises(BufferError, match="does not copy"):
            t.__dlpack__(dl_device=(2, 0))
        with pytest.raises(BufferError, match="without copying"):
            t.__dlpack__(copy=True)
        # Unconsumed capsules free themselves; consumed ones stay valid after t is gone.
        a = np.from_dlpack(t)
        del t
        assert a.tolist() == data.tolist()


def test_batches_outlive_the_reader(tmp_path, rng):
    data = rng.integers(0, 255, (50, 64), dtype=np.uint8)
    ds = build(tmp_path / "s", data)
    batches = [ds[[i, 49 - i]] for i in range(20)]
    ds.close()
    for i, b in enumerate(batches):
        assert np.array_equal(host(b), data[[i, 49 - i]])


def test_concurrent_gathers_are_exact(tmp_path, rng):
    data = rng.integers(0, 2**31, (5000, 300), dtype=np.int32)
    for codec in ("raw", "zstd"):
        ds = build(tmp_path / codec, data, codec)
        errors = []

        def work(seed, ds=ds, errors=errors):
            r = np.random.default_rng(seed)
            for _ in range(40):
                idx = r.integers(0, len(data), 256)
                if not np.array_equal(host(ds[idx]), data[idx]):
                    errors.append(seed)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        ds.close()


def test_torch_consumes_dltensor(tmp_path):
    torch = pytest.importorskip("torch")
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    with build(tmp_path / "s", data) as ds:
        t = torch.from_dlpack(ds[[3, 1]])
        assert t.tolist() == data[[3, 1]].tolist()


def test_jax_consumes_dltensor(tmp_path):
    jax_dlpack = pytest.importorskip("jax.dlpack")
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    with build(tmp_path / "s", data) as ds:
        assert np.asarray(jax_dlpack.from_dlpack(ds[[3, 1]])).tolist() == data[[3, 1]].tolist()
