"""What Torch and JAX users meet: bfloat16 and float8 stores through ml_dtypes,
DLPack type codes, NumPy's array interface on host tensors, RaggedBatch refusing
to pass for one tensor, framework index arrays, and Dense.shape."""

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import DLPackProducer, host
from loaderx import _native
from loaderx._schema import check_dtype
from loaderx.allocator import _runtime, cuda
from loaderx.errors import InvalidArgumentError, OutOfRangeError
from loaderx.zrecord import Dense, DLTensor, Ragged, RaggedBatch


@pytest.fixture
def ml_dtypes():
    return pytest.importorskip("ml_dtypes")


# name -> (on-disk code, DLPack type code, bits, torch's name for it or None)
ML_DTYPES = {
    "bfloat16": (15, 4, 16, "bfloat16"),
    "float8_e3m4": (16, 7, 8, None),
    "float8_e4m3": (17, 8, 8, None),
    "float8_e4m3b11fnuz": (18, 9, 8, None),
    "float8_e4m3fn": (19, 10, 8, "float8_e4m3fn"),
    "float8_e4m3fnuz": (20, 11, 8, "float8_e4m3fnuz"),
    "float8_e5m2": (21, 12, 8, "float8_e5m2"),
    "float8_e5m2fnuz": (22, 13, 8, "float8_e5m2fnuz"),
    "float8_e8m0fnu": (23, 14, 8, "float8_e8m0fnu"),
}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Versioned(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32 * 2),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


def versioned(capsule):
    """(version, (type code, bits, lanes)) of an unconsumed versioned capsule."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    m = _Versioned.from_address(get(capsule, b"dltensor_versioned"))
    dt = m.dl_tensor.dtype
    return tuple(m.version), (dt.code, dt.bits, dt.lanes)


def every_bit_pattern(dtype, shape):
    """Every value of a 1- or 2-byte type in turn (NaNs and infinities too)."""
    dt = np.dtype(dtype)
    raw = np.uint8 if dt.itemsize == 1 else np.uint16
    n = int(np.prod(shape))
    return (np.arange(n) % (1 << (8 * dt.itemsize))).astype(raw).view(dt).reshape(shape)


def run_python(code):
    """`code` in a fresh interpreter; its stdout."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


# ---- bfloat16 and float8 ------------------------------------------------------------


def test_the_native_table_lists_the_ml_dtypes_after_the_numpy_ones():
    assert _native.DTYPES[14:] == tuple(ML_DTYPES)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("name", ML_DTYPES)
def test_dense_ml_dtypes_round_trip_exact_bits(tmp_path, ml_dtypes, name, codec):
    dt = np.dtype(getattr(ml_dtypes, name))
    data = every_bit_pattern(dt, (64 if dt.itemsize == 1 else 16384, 2, 2))
    with Dense.create(tmp_path / "s", dt, data.shape[1:], codec=codec) as w:
        w.append(data)
    disk, code, bits, _ = ML_DTYPES[name]
    assert (tmp_path / "s" / "header.bin").read_bytes()[13] == disk
    with Dense.open(tmp_path / "s") as ds:
        assert ds.dtype == dt and ds.dtype.name == name
        t = ds[:]
        assert t.dtype == dt
        assert repr(t).endswith(f"dtype={name}, device=cpu)")
        assert versioned(t.__dlpack__(max_version=(1, 1))) == ((1, 1), (code, bits, 1))
        got = np.asarray(t)
        assert got.dtype == dt
        assert got.tobytes() == data.tobytes()
        assert np.asarray(ds[[7, 0, 7]]).tobytes() == data[[7, 0, 7]].tobytes()


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_ragged_ml_dtypes_round_trip_exact_bits(tmp_path, ml_dtypes, name):
    dt = np.dtype(getattr(ml_dtypes, name))
    records = [every_bit_pattern(dt, (n,)) for n in (5, 0, 256, 3)]
    with Ragged.create(tmp_path / "s", name, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(records))
    with Ragged.open(tmp_path / "s") as rs:
        assert rs.dtype == dt
        b = rs[3, 2]
        assert b.dtype == dt
        got = [np.asarray(r) for r in b.to_tensors()]
        assert [g.dtype for g in got] == [dt, dt]
        assert [g.tobytes() for g in got] == [records[3].tobytes(), records[2].tobytes()]


@pytest.mark.parametrize("name", ML_DTYPES)
def test_jax_ml_dtype_arrays_append_without_conversion(tmp_path, ml_dtypes, name):
    jnp = pytest.importorskip("jax.numpy")
    dt = np.dtype(getattr(ml_dtypes, name))
    data = every_bit_pattern(dt, (64, 4))
    with Dense.create(tmp_path / "s", dt, (4,), codec="raw") as w:
        w.append(jnp.asarray(data))
    with Dense.open(tmp_path / "s") as ds:
        got = np.asarray(ds[:])
        assert got.dtype == dt
        assert got.tobytes() == data.tobytes()


@pytest.mark.parametrize("name", [n for n, v in ML_DTYPES.items() if v[3] is not None])
def test_torch_ml_dtype_tensors_append_without_conversion(tmp_path, ml_dtypes, name):
    torch = pytest.importorskip("torch")
    dt = np.dtype(getattr(ml_dtypes, name))
    data = every_bit_pattern(dt, (64, 4))
    raw = torch.from_numpy(data.view(np.uint8 if dt.itemsize == 1 else np.int16).copy())
    tensor = raw.view(getattr(torch, ML_DTYPES[name][3]))
    with Ragged.create(tmp_path / "r", dt, ndim=1, codec="zstd") as w:
        w.append(
            RaggedBatch(
                tensor.reshape(-1),
                torch.tensor([0, 256], dtype=torch.int32),
                torch.tensor([[256]], dtype=torch.uint64),
            )
        )
    with Dense.create(tmp_path / "s", dt, (4,), codec="raw") as w:
        w.append(tensor)
    with Dense.open(tmp_path / "s") as ds, Ragged.open(tmp_path / "r") as rs:
        assert np.asarray(ds[:]).tobytes() == data.tobytes()
        assert np.asarray(rs[0].to_tensors()[0]).tobytes() == data.tobytes()


def test_a_strided_dlpack_producer_is_refused_not_copied(tmp_path):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    with Dense.create(tmp_path / "s", "float32", (2,), codec="raw") as w:
        with pytest.raises(InvalidArgumentError, match=r"data: the tensor is strided"):
            w.append(DLPackProducer(base[:, ::2]))
        w.append(DLPackProducer(base[1:, :2].copy()))
        w.append(DLPackProducer(base[2:, 2:]))  # a contiguous row with a byte offset
    with Dense.open(tmp_path / "s") as ds:
        assert np.asarray(ds[:]).tolist() == [[4.0, 5.0], [8.0, 9.0], [10.0, 11.0]]


def test_an_imported_dlpack_array_is_released_exactly_once(tmp_path):
    data = np.arange(8, dtype=np.int64)
    before = sys.getrefcount(data)
    t = DLTensor._from_dlpack(data)
    assert sys.getrefcount(data) == before + 1  # NumPy's capsule holds the array
    view = np.asarray(t)
    del t
    assert view.tolist() == list(range(8))  # the view keeps the import alive
    assert sys.getrefcount(data) == before + 1
    del view
    assert sys.getrefcount(data) == before  # the producer's deleter ran, once


def test_a_jax_array_sharded_over_host_devices_appends_by_rows(tmp_path, ml_dtypes):
    pytest.importorskip("jax")
    out = run_python(
        f"""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from loaderx.errors import InvalidArgumentError
        from loaderx.zrecord import Dense

        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("rows", "cols"))
        x = jnp.arange(8 * 4, dtype=jnp.bfloat16).reshape(8, 4)
        for name, spec in [("rows", P("rows")), ("all", P(("rows", "cols"))),
                           ("replicated", P()), ("columns", P(None, "cols"))]:
            y = jax.device_put(x, NamedSharding(mesh, spec))
            path = {str(tmp_path)!r} + "/" + name
            w = Dense.create(path, "bfloat16", (4,), codec="raw")
            try:
                w.append(y)
            except InvalidArgumentError as e:
                w.abort()
                print(name, "refused:", e)
                continue
            w.close()
            with Dense.open(path) as ds:
                same = np.asarray(ds[:]).tobytes() == np.asarray(x).tobytes()
                print(name, len(y.addressable_shards), same)
        """
    )
    assert out.splitlines() == [
        "rows 4 True",
        "all 4 True",
        "replicated 4 True",
        "columns refused: data is sharded along axis 1; append takes arrays sharded by "
        "rows (axis 0) only, without copying: pass np.asarray(data) if one host copy is intended",
    ]


@pytest.mark.parametrize("name", [n for n, v in ML_DTYPES.items() if v[3] is not None])
def test_torch_gets_its_own_ml_dtypes(tmp_path, ml_dtypes, name):
    torch = pytest.importorskip("torch")
    dt = np.dtype(getattr(ml_dtypes, name))
    data = every_bit_pattern(dt, (64, 4))
    with Dense.create(tmp_path / "s", dt, (4,), codec="zstd") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        for t in (torch.from_dlpack(ds[:]), torch.as_tensor(ds[:])):
            assert t.dtype == getattr(torch, ML_DTYPES[name][3])
            assert t.shape == (64, 4)
            assert t.view(torch.uint8).numpy().tobytes() == data.tobytes()


@pytest.mark.parametrize("name", ML_DTYPES)
def test_jax_gets_the_ml_dtypes(tmp_path, ml_dtypes, name):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    dt = np.dtype(getattr(ml_dtypes, name))
    data = every_bit_pattern(dt, (64, 4))
    with Dense.create(tmp_path / "s", dt, (4,), codec="raw") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        for a in (jax.dlpack.from_dlpack(ds[:]), jnp.asarray(ds[:])):
            assert a.dtype == dt
            assert a.shape == (64, 4)
            assert np.asarray(a).tobytes() == data.tobytes()


def test_check_dtype_takes_ml_dtypes_by_object_and_by_name(ml_dtypes):
    for name in ML_DTYPES:
        dt = np.dtype(getattr(ml_dtypes, name))
        assert check_dtype(dt) == dt
        assert check_dtype(getattr(ml_dtypes, name)) == dt
        assert check_dtype(name) == dt
    # The kind "V" that ml_dtypes types share with raw bytes keeps its refusal.
    with pytest.raises(ValueError, match="string/bytes dtype"):
        check_dtype("V2")
    with pytest.raises(ValueError, match="structured dtype"):
        check_dtype(np.dtype([("a", ml_dtypes.bfloat16)]))
    with pytest.raises(ValueError, match="subarray dtype"):
        check_dtype(np.dtype((ml_dtypes.bfloat16, (2,))))
    with pytest.raises(ValueError, match="not a NumPy dtype"):
        check_dtype("bfloat17")


def test_ml_dtypes_is_imported_only_when_such_a_dtype_is_used(tmp_path, ml_dtypes):
    out = run_python(
        f"""
        import sys
        import numpy as np
        from loaderx.zrecord import Dense

        class Positions:  # another framework's index array, by protocol only
            def __init__(self, a): self.a = a
            def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
            def __dlpack_device__(self): return self.a.__dlpack_device__()

        with Dense.create({str(tmp_path / "f")!r}, "float32", (2,), codec="raw") as w:
            w.append(np.arange(6, dtype=np.float32).reshape(3, 2))
        with Dense.open({str(tmp_path / "f")!r}) as ds:
            got = np.asarray(ds[Positions(np.array([2, 0]))]).tolist()
            print(got, ds.dtype, "ml_dtypes" in sys.modules)
        print(sorted(m for m in ("torch", "jax") if m in sys.modules))
        Dense.create({str(tmp_path / "b")!r}, "bfloat16", (2,), codec="raw").abort()
        print("ml_dtypes" in sys.modules)
        """
    )
    assert out.splitlines() == ["[[4.0, 5.0], [0.0, 1.0]] float32 False", "[]", "True"]


def test_without_ml_dtypes_asking_for_its_types_says_to_install_it(tmp_path, ml_dtypes):
    data = np.array([[1.0, 2.0], [3.0, -4.0]], dtype=ml_dtypes.bfloat16)
    with Dense.create(tmp_path / "b", data.dtype, (2,), codec="raw") as w:
        w.append(data)
    out = run_python(
        f"""
        import sys
        sys.modules["ml_dtypes"] = None  # what an environment without it imports
        from loaderx.errors import MissingDependencyError
        from loaderx.zrecord import Dense, Ragged

        def refusal(call):
            try:
                call()
            except MissingDependencyError as e:
                return f"{{isinstance(e, ImportError)}} {{e.name}} {{e}}"
            return "no error"

        print(refusal(lambda: Dense.create({str(tmp_path / "x")!r}, "bfloat16", (), codec="raw")))
        print(refusal(lambda: Ragged.create({str(tmp_path / "y")!r}, "float8_e4m3fn", ndim=1,
                                            codec="raw")))
        with Dense.open({str(tmp_path / "b")!r}) as ds:
            t = ds[:]  # reading needs no NumPy dtype
            print(repr(t), t.nbytes)
            print(refusal(lambda: ds.dtype))
            print(refusal(lambda: t.dtype))
            print(refusal(lambda: t.__array_interface__))
        """
    )
    needs = "True ml_dtypes dtype {} needs the ml_dtypes package, which is not installed: "
    assert out.splitlines() == [
        needs.format("bfloat16") + "pip install ml-dtypes",
        needs.format("float8_e4m3fn") + "pip install ml-dtypes",
        "DLTensor(shape=(2, 2), dtype=bfloat16, device=cpu) 8",
        needs.format("bfloat16") + "pip install ml-dtypes",
        needs.format("bfloat16") + "pip install ml-dtypes",
        needs.format("bfloat16") + "pip install ml-dtypes",
    ]
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_torch_reads_bfloat16_without_ml_dtypes(tmp_path, ml_dtypes):
    pytest.importorskip("torch")
    data = np.array([1.0, 2.5, -3.0], dtype=ml_dtypes.bfloat16)
    with Dense.create(tmp_path / "b", data.dtype, (), codec="zstd") as w:
        w.append(data)
    out = run_python(
        f"""
        import sys
        sys.modules["ml_dtypes"] = None
        import torch
        from loaderx.zrecord import Dense

        with Dense.open({str(tmp_path / "b")!r}) as ds:
            t = torch.from_dlpack(ds[:])
            print(t.dtype, t.tolist())
        """
    )
    assert out.splitlines() == ["torch.bfloat16 [1.0, 2.5, -3.0]"]


def test_capsules_declare_no_newer_version_than_asked(tmp_path):
    data = np.array([[1, 2]], dtype=np.int8)
    with Dense.create(tmp_path / "s", np.int8, (2,), codec="raw") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        t = ds[:]
        assert versioned(t.__dlpack__(max_version=(1, 0))) == ((1, 0), (0, 8, 1))
        assert versioned(t.__dlpack__(max_version=(1, 1))) == ((1, 1), (0, 8, 1))
        assert versioned(t.__dlpack__(max_version=(1, 7))) == ((1, 1), (0, 8, 1))
        assert versioned(t.__dlpack__(max_version=(2, 0))) == ((1, 1), (0, 8, 1))


# ---- the array interface ---------------------------------------------------------------

TYPESTRS = {
    np.bool_: "|b1",
    np.int8: "|i1",
    np.int16: "<i2",
    np.int32: "<i4",
    np.int64: "<i8",
    np.uint8: "|u1",
    np.uint16: "<u2",
    np.uint32: "<u4",
    np.uint64: "<u8",
    np.float16: "<f2",
    np.float32: "<f4",
    np.float64: "<f8",
    np.complex64: "<c8",
    np.complex128: "<c16",
}


@pytest.mark.parametrize("dtype", TYPESTRS)
def test_array_interface_of_every_numpy_dtype(tmp_path, dtype):
    data = (np.arange(24) % 2).astype(dtype).reshape(4, 2, 3)
    with Dense.create(tmp_path / "s", dtype, (2, 3), codec="raw") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        t = ds[[3, 1]]
        interface = t.__array_interface__
        address = np.from_dlpack(t).__array_interface__["data"][0]
        assert interface == {
            "version": 3,
            "shape": (2, 2, 3),
            "typestr": TYPESTRS[dtype],
            "strides": None,
            "data": (address, False),
        }
        got = np.asarray(t)
        assert got.dtype == dtype
        assert np.array_equal(got, data[[3, 1]])


def test_np_asarray_shares_writable_host_memory(tmp_path):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with Dense.create(tmp_path / "s", np.float32, (4,), codec="zstd") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        t = ds[[2, 0]]
        a = np.asarray(t)
        assert a.flags.writeable and a.base is t
        a[0, 1] = -1.0
        assert np.from_dlpack(t).tolist() == [[8.0, -1.0, 10.0, 11.0], [0.0, 1.0, 2.0, 3.0]]
        one = np.asarray(ds[1])  # a record of shape (4,)
        assert one.tolist() == [4.0, 5.0, 6.0, 7.0]
        assert np.asarray(ds[[]]).shape == (0, 4)
        del t
        assert a.tolist() == [[8.0, -1.0, 10.0, 11.0], [0.0, 1.0, 2.0, 3.0]]
    with Dense.create(tmp_path / "scalar", np.int64, (), codec="raw") as w:
        w.append(np.array([5, 6, 7], dtype=np.int64))
    with Dense.open(tmp_path / "scalar") as ds:
        zero_d = np.asarray(ds[2])
        assert zero_d.shape == () and zero_d.dtype == np.int64 and int(zero_d) == 7


def test_a_read_only_source_stays_read_only(tmp_path):
    source = np.arange(6, dtype=np.int16)
    source.flags.writeable = False
    t = DLTensor._from_array(source)
    assert t.__array_interface__["data"] == (source.__array_interface__["data"][0], True)
    a = np.asarray(t)
    assert not a.flags.writeable and np.shares_memory(a, source)
    assert a.tolist() == [0, 1, 2, 3, 4, 5]


def test_ragged_parts_have_the_interface(tmp_path):
    records = [np.array([1, 2, 3], dtype=np.int32), np.array([4], dtype=np.int32)]
    with Ragged.create(tmp_path / "r", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(records))
    with Ragged.open(tmp_path / "r") as rs:
        b = rs[1, 0]
        assert np.asarray(b.values).tolist() == [4, 1, 2, 3]
        assert np.asarray(b.cu_seqlens).tolist() == [0, 1, 4]
        assert np.asarray(b.shapes).tolist() == [[1], [3]]
        assert [np.asarray(r).tolist() for r in b.to_tensors()] == [[4], [1, 2, 3]]


def test_device_tensors_have_no_interface(tmp_path, fake_runtime, monkeypatch):
    # The fake runtime's "device" memory is host memory, but the tensor says it
    # lives on a CUDA device, and that is what counts.
    monkeypatch.setattr(_runtime, "_loaded", lambda spec: None)
    monkeypatch.setenv("LOADERX_CUDA_LIBRARY", str(fake_runtime))
    monkeypatch.setenv("FAKE_GPU_DEVICES", "1")
    with Dense.create(tmp_path / "s", np.float32, (2,), codec="raw") as w:
        w.append(np.zeros((3, 2), dtype=np.float32))
    with Dense.open(tmp_path / "s") as ds, cuda.Allocator() as gpu:
        t = ds.bind(gpu)[[0, 1]]
        assert t.device == (2, 0)
        message = r"device \(2, 0\), not in host memory.*from_dlpack"
        with pytest.raises(TypeError, match=message):
            t.__array_interface__  # noqa: B018
        with pytest.raises(TypeError, match=message):
            np.asarray(t)
        del t


def test_jax_and_torch_take_host_tensors(tmp_path):
    data = np.arange(12, dtype=np.int32).reshape(4, 3)
    with Dense.create(tmp_path / "s", np.int32, (3,), codec="raw") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        t = ds[[3, 0]]
        try:
            import jax.numpy as jnp
        except ImportError:
            jnp = None
        try:
            import torch
        except ImportError:
            torch = None
        if jnp is None and torch is None:
            pytest.skip("neither jax nor torch is installed")
        if jnp is not None:
            j = jnp.asarray(t)
            assert j.dtype == np.int32 and j.tolist() == [[9, 10, 11], [0, 1, 2]]
        if torch is not None:
            x = torch.as_tensor(t)
            assert x.dtype == torch.int32 and x.tolist() == [[9, 10, 11], [0, 1, 2]]
            x[0, 0] = -5  # shares the batch's memory
            assert np.asarray(t)[0].tolist() == [-5, 10, 11]


# ---- a RaggedBatch is not a tensor ------------------------------------------------------

NOT_ONE_TENSOR = r"RaggedBatch is not one tensor.*batch\.values.*batch\.to_tensors\(\)"


def ragged_batch():
    return RaggedBatch.from_records([np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int32)])


def test_ragged_batch_refuses_dlpack_import_in_numpy():
    b = ragged_batch()
    with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
        np.from_dlpack(b)
    with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
        b.__dlpack__()
    with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
        b.__dlpack_device__()
    assert np.from_dlpack(b.values).tolist() == [0, 1, 2, 0, 1]


def test_ragged_batch_is_not_silently_an_object_array():
    b = ragged_batch()
    for convert in (np.asarray, np.array):
        with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
            convert(b)
    assert np.asarray(b.values).tolist() == [0, 1, 2, 0, 1]


def test_ragged_batch_refuses_dlpack_import_in_jax():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
        jax.dlpack.from_dlpack(ragged_batch())
    with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
        jnp.asarray(ragged_batch())


def test_ragged_batch_refuses_dlpack_import_in_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
        torch.from_dlpack(ragged_batch())
    with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
        torch.as_tensor(ragged_batch())


def test_dense_append_of_a_ragged_batch_says_what_to_do(tmp_path):
    with Dense.create(tmp_path / "s", np.int32, (), codec="raw") as w:
        with pytest.raises(TypeError, match=NOT_ONE_TENSOR):
            w.append(ragged_batch())
        w.abort()


# ---- indexing with other frameworks' arrays ------------------------------------------


@pytest.fixture
def dense(tmp_path):
    data = np.arange(20, dtype=np.int64).reshape(10, 2)
    with Dense.create(tmp_path / "s", np.int64, (2,), codec="zstd") as w:
        w.append(data)
    with Dense.open(tmp_path / "s") as ds:
        yield ds


class OnlyIndex:
    def __init__(self, i):
        self.i = i

    def __index__(self):
        return self.i


class OnlyArray:
    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


def test_zero_d_integer_arrays_are_one_position(dense):
    for key in (np.array(3), np.array(3, dtype=np.uint8), OnlyIndex(3), OnlyArray(np.array(3))):
        t = dense[key]
        assert t.shape == (2,) and host(t).tolist() == [6, 7]
    for bad in (np.array(10), np.array(-1), OnlyIndex(10), np.array(2**64 - 1, dtype=np.uint64)):
        with pytest.raises(OutOfRangeError, match="out of range|negative"):
            dense[bad]
    for bad in (np.array(True), np.array(1.0)):
        with pytest.raises(TypeError, match="positions must be integers"):
            dense[bad]


def test_protocol_arrays_index_a_store(dense):
    assert host(dense[OnlyArray(np.array([9, 0, 9]))]).tolist() == [[18, 19], [0, 1], [18, 19]]
    positions = DLTensor._from_array(np.array([4, 1], dtype=np.int32))
    assert host(dense[positions]).tolist() == [[8, 9], [2, 3]]


def test_torch_index_tensors(dense, tmp_path):
    torch = pytest.importorskip("torch")
    assert host(dense[torch.tensor([1, 2])]).tolist() == [[2, 3], [4, 5]]
    assert host(dense[torch.tensor([7, 7], dtype=torch.int32)]).tolist() == [[14, 15], [14, 15]]
    assert host(dense[torch.tensor(5)]).tolist() == [10, 11]
    assert dense[torch.tensor([], dtype=torch.int64)].shape == (0, 2)
    with pytest.raises(OutOfRangeError):
        dense[torch.tensor([0, 10])]
    with pytest.raises(TypeError, match="positions must be integers"):
        dense[torch.tensor([1.0])]
    with pytest.raises(ValueError, match="one-dimensional"):
        dense[torch.zeros((2, 2), dtype=torch.int64)]
    with Ragged.create(tmp_path / "r", np.int16, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records([np.arange(n, dtype=np.int16) for n in (1, 2, 3)]))
    with Ragged.open(tmp_path / "r") as rs:
        b = rs[torch.tensor([2, 0])]
        assert [host(r).tolist() for r in b.to_tensors()] == [[0, 1, 2], [0]]


def test_jax_index_arrays(dense):
    jnp = pytest.importorskip("jax.numpy")
    assert host(dense[jnp.array([1, 2])]).tolist() == [[2, 3], [4, 5]]
    assert host(dense[jnp.array([9, 0, 9], dtype=jnp.uint8)]).tolist() == [
        [18, 19],
        [0, 1],
        [18, 19],
    ]
    assert host(dense[jnp.array(4)]).tolist() == [8, 9]
    with pytest.raises(OutOfRangeError):
        dense[jnp.array([10])]
    with pytest.raises(TypeError, match="positions must be integers"):
        dense[jnp.array([1.0])]


# ---- shape ------------------------------------------------------------------------------


def test_dense_shape_is_len_then_item_shape(tmp_path):
    for name, item_shape, n in (("a", (2, 3), 5), ("b", (), 4), ("c", (7,), 0)):
        with Dense.create(tmp_path / name, np.uint8, item_shape, codec="raw") as w:
            w.append(np.zeros((n, *item_shape), dtype=np.uint8))
        with Dense.open(tmp_path / name) as ds:
            assert ds.shape == (n, *item_shape)
            assert ds[:].shape == ds.shape
