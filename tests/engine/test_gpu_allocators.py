"""The cuda and amdgpu allocators, against a fake runtime built from
tests/support/fake_gpu_runtime.c (device memory is host memory there, so the tests can
read what a gather put on the "device"), and the runtime discovery order."""

import ctypes
import gc
import multiprocessing as mp
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx.allocator import Allocator, _runtime, amdgpu, cuda
from loaderx.allocator import host as host_alloc
from loaderx.dataloader import Loader
from loaderx.errors import DeviceError
from loaderx.zrecord import Dense, Ragged, RaggedBatch

SUPPORT = Path(__file__).parents[1] / "support"
KDL_CUDA, KDL_ROCM = 2, 10


@pytest.fixture
def fake(fake_runtime, monkeypatch):
    """The fake runtime named by both override variables, with its counters."""
    # A runtime this process already loaded comes first (torch loads the real
    # CUDA one when another test imports it); these tests want the fake.
    monkeypatch.setattr(_runtime, "_loaded", lambda spec: None)
    monkeypatch.setenv("LOADERX_CUDA_LIBRARY", str(fake_runtime))
    monkeypatch.setenv("LOADERX_HIP_LIBRARY", str(fake_runtime))
    monkeypatch.setenv("FAKE_GPU_DEVICES", "2")
    lib = ctypes.CDLL(str(fake_runtime))
    for name in ("fake_live_device", "fake_live_pinned", "fake_copies", "fake_copied_bytes"):
        getattr(lib, name).restype = ctypes.c_long
    return lib


class _Managed(ctypes.Structure):
    # The head of DLManagedTensor (legacy capsule): DLTensor.data, then its device.
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("id", ctypes.c_int32)]


def device_bytes(t) -> bytes:
    """The bytes a DLTensor's capsule points at (host memory in the fake)."""
    cap = t.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    m = _Managed.from_address(get(cap, b"dltensor"))
    assert (m.device_type, m.id) == t.__dlpack_device__()
    return ctypes.string_at(m.data, t.nbytes)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-stores")
    rng = np.random.default_rng(7)
    images = rng.integers(0, 255, (64, 3, 8, 8), dtype=np.uint8)
    records = [rng.integers(0, 1000, rng.integers(0, 9), dtype=np.int32) for _ in range(64)]
    for codec in ("raw", "zstd"):
        with Dense.create(root / f"dense-{codec}", np.uint8, (3, 8, 8), codec=codec) as w:
            w.append(images)
        with Ragged.create(root / f"ragged-{codec}", np.int32, ndim=1, codec=codec) as w:
            w.append(RaggedBatch.from_records(records))
    return root, images, records


IDX = [5, 0, 63, 5, 17]


@pytest.mark.parametrize("kind, dl_type", [(cuda, KDL_CUDA), (amdgpu, KDL_ROCM)])
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_dense_batches_land_on_the_device_exactly(fake, stores, kind, dl_type, codec):
    root, images, _ = stores
    a = kind.Allocator(device=1)
    assert isinstance(a, Allocator) and a.device == (dl_type, 1)
    assert a.library == os.environ["LOADERX_CUDA_LIBRARY"]
    copies = fake.fake_copies()
    with Dense.open(root / f"dense-{codec}") as ds:
        view = ds.bind(a)
        batch = view[IDX]
        one = view[9]
    assert batch.device == batch.__dlpack_device__() == (dl_type, 1)
    assert batch.shape == (5, 3, 8, 8) and one.shape == (3, 8, 8)
    assert device_bytes(batch) == images[IDX].tobytes()
    assert device_bytes(one) == images[9].tobytes()
    # CUDA memory is filled through pinned staging and one runtime copy per
    # output; HIP managed memory is written in place by the CPU.
    assert fake.fake_copies() - copies == (2 if kind is cuda else 0)
    assert a.stats().live == 2
    with pytest.raises(RuntimeError, match="Unsupported device"):
        np.from_dlpack(batch)  # NumPy reads host memory only
    del batch, one
    gc.collect()
    assert a.stats().live == 0
    a.close()


@pytest.mark.parametrize("kind, dl_type", [(cuda, KDL_CUDA), (amdgpu, KDL_ROCM)])
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_ragged_batches_land_on_the_device_exactly(fake, stores, kind, dl_type, codec):
    root, _, records = stores
    a = kind.Allocator(device=0)
    with Ragged.open(root / f"ragged-{codec}") as rs:
        b = rs.bind(a)[IDX]
    want = [records[i] for i in IDX]
    assert b.values.__dlpack_device__() == (dl_type, 0)
    assert device_bytes(b.values) == np.concatenate(want).tobytes()
    cu = np.frombuffer(device_bytes(b.cu_seqlens), np.int32)
    assert cu.tolist() == np.cumsum([0] + [len(r) for r in want]).tolist()
    shapes = np.frombuffer(device_bytes(b.shapes), np.uint64)
    assert shapes.tolist() == [len(r) for r in want]
    if kind is amdgpu:  # managed memory: the host may split it into records
        parts = b.to_tensors()
        assert [p.__dlpack_device__() for p in parts] == [(dl_type, 0)] * len(want)
        assert [device_bytes(p) for p in parts] == [r.tobytes() for r in want]
    else:
        with pytest.raises(ValueError, match="host cannot read"):
            b.to_tensors()
    del b
    a.close()


def test_managed_ragged_batches_append_like_host_ones(fake, stores, tmp_path):
    root, _, records = stores
    with Ragged.open(root / "ragged-zstd") as rs:
        b = rs.bind(amdgpu.Allocator())[IDX]
        refused = rs.bind(cuda.Allocator())[IDX]
    with Ragged.create(tmp_path / "copy", np.int32, ndim=1, codec="raw") as w:
        w.append(b)
        with pytest.raises(ValueError, match="host cannot read"):
            w.append(refused)
    with Ragged.open(tmp_path / "copy") as back:
        got = back[:].to_tensors()
        assert [np.from_dlpack(t).tolist() for t in got] == [records[i].tolist() for i in IDX]


def test_managed_batches_append_like_host_ones_and_device_ones_are_refused(fake, stores, tmp_path):
    root, images, _ = stores
    with Dense.open(root / "dense-raw") as ds:
        hip_batch = ds.bind(amdgpu.Allocator())[IDX]
        cuda_batch = ds.bind(cuda.Allocator())[IDX]
    with Dense.create(tmp_path / "copy", np.uint8, (3, 8, 8), codec="zstd") as w:
        w.append(hip_batch)
        with pytest.raises(ValueError, match="host cannot read"):
            w.append(cuda_batch)
    with Dense.open(tmp_path / "copy") as back:
        assert np.array_equal(np.from_dlpack(back[:]), images[IDX])


def test_pools_reuse_device_memory_and_close_frees_it(fake, stores):
    root, images, _ = stores
    base_device, base_pinned = fake.fake_live_device(), fake.fake_live_pinned()
    a = cuda.Allocator()
    with Dense.open(root / "dense-raw") as ds:
        view = ds.bind(a)
        for _ in range(20):
            view[IDX]  # dropped at once
        # One device region and one pinned staging region, reused every time.
        assert fake.fake_live_device() - base_device == 1
        assert fake.fake_live_pinned() - base_pinned == 1
        kept = view[IDX]
    a.close()
    assert a.closed and a.stats().live == 1
    assert device_bytes(kept) == images[IDX].tobytes()  # closing frees nothing in use
    with pytest.raises(ValueError, match="closed"):
        a.allocate(10)
    del kept
    gc.collect()
    assert fake.fake_live_device() == base_device
    assert fake.fake_live_pinned() == base_pinned


@pytest.mark.parametrize("kind, api", [(cuda, "cuda"), (amdgpu, "hip")])
def test_the_callers_current_device_is_left_alone(fake, stores, kind, api):
    root, images, _ = stores
    set_device, get_device = getattr(fake, f"{api}SetDevice"), getattr(fake, f"{api}GetDevice")
    current = ctypes.c_int(-1)
    assert set_device(0) == 0
    a = kind.Allocator(device=1)
    with Ragged.open(root / "ragged-zstd") as rs, Dense.open(root / "dense-zstd") as ds:
        batch, tokens = ds.bind(a)[IDX], rs.bind(a)[IDX]
    del batch, tokens
    a.close()
    assert get_device(ctypes.byref(current)) == 0 and current.value == 0


def test_allocations_carry_their_device(fake):
    with amdgpu.Allocator(device=1) as a:
        r = a.allocate(1000)
        assert r.device == (KDL_ROCM, 1) and r.size == 1000 and r.address % 256 == 0
        assert a.stats().live == 1
        del r
        assert a.stats().live == 0


def test_a_loader_places_each_binding_on_its_device(fake, stores):
    root, images, _ = stores

    class Fixed:
        def next(self):
            return np.array([3, 1, 4, 1, 5, 9], dtype=np.uint64)

    a0, a1 = cuda.Allocator(device=0), cuda.Allocator(device=1)
    with Dense.open(root / "dense-zstd") as ds:
        streams = {"image": [ds.bind(a0), ds.bind(a1)]}
        with Loader(streams, Fixed(), workers=2, prefetch=1) as loader:
            shards = next(loader)
    assert [s["image"].device for s in shards] == [(KDL_CUDA, 0), (KDL_CUDA, 1)]
    assert device_bytes(shards[0]["image"]) == images[[3, 1, 4]].tobytes()
    assert device_bytes(shards[1]["image"]) == images[[1, 5, 9]].tobytes()


def test_device_errors(fake, monkeypatch):
    with pytest.raises(ValueError, match="device 2 does not exist: .* reports 2 device"):
        cuda.Allocator(device=2)
    with pytest.raises(ValueError, match="device must be in 0..2147483647"):
        amdgpu.Allocator(device=-1)
    with pytest.raises(ValueError, match="device must be in 0..2147483647"):
        cuda.Allocator(device=2**31)
    with pytest.raises(ValueError, match="idle_limit must be in"):
        cuda.Allocator(idle_limit=2**64)
    monkeypatch.setenv("FAKE_GPU_DEVICES", "0")
    with pytest.raises(RuntimeError, match="counting devices failed: no GPU device is present"):
        amdgpu.Allocator()
    monkeypatch.setenv("LOADERX_CUDA_LIBRARY", str(SUPPORT / "fake_gpu_runtime.c"))
    with pytest.raises(RuntimeError, match="cannot load .*fake_gpu_runtime.c"):
        cuda.Allocator()


# -- pickling ---------------------------------------------------------------------


def _gather_on_device(reader, positions):
    batch = reader[positions]
    a = reader.allocator
    return os.getpid(), batch.device, device_bytes(batch), a.library, a.idle_limit


@pytest.mark.parametrize("kind, dl_type", [(cuda, KDL_CUDA), (amdgpu, KDL_ROCM)])
def test_gpu_allocators_and_their_views_pickle_by_device(fake, stores, kind, dl_type):
    root, images, _ = stores
    a = kind.Allocator(device=1, idle_limit=4096)
    with Dense.open(root / "dense-zstd") as ds:
        view, a2 = pickle.loads(pickle.dumps((ds.bind(a), a)))
    assert type(a2) is kind.Allocator and a2 is not a and view.allocator is a2
    assert (a2.device, a2.library, a2.idle_limit) == ((dl_type, 1), a.library, 4096)
    batch = view[IDX]
    assert batch.device == (dl_type, 1) and device_bytes(batch) == images[IDX].tobytes()
    assert a2.stats().live == 1 and a.stats().live == 0
    # In a spawned process, which finds the runtime through the pickled path.
    with mp.get_context("spawn").Pool(1) as pool:
        pid, device, data, library, idle = pool.apply(_gather_on_device, (view, IDX))
    assert pid != os.getpid()
    assert (device, data, library, idle) == ((dl_type, 1), images[IDX].tobytes(), a.library, 4096)
    a.close()
    with pytest.raises(ValueError, match="the allocator is closed; a closed allocator cannot"):
        pickle.dumps(a)


def test_a_gpu_allocator_that_cannot_be_reopened_is_a_device_error(fake, stores, monkeypatch):
    root, _, _ = stores
    a = cuda.Allocator(device=1)
    with Dense.open(root / "dense-raw") as ds:
        blob = pickle.dumps(ds.bind(a))
    monkeypatch.setenv("FAKE_GPU_DEVICES", "1")  # the receiving side has one device
    with pytest.raises(DeviceError) as info:
        pickle.loads(blob)
    assert str(info.value).startswith(
        f"cannot reopen the pickled cuda.Allocator(device=1) in process {os.getpid()} "
        f"through {a.library}: device 1 does not exist"
    )
    assert str(info.value).endswith(
        "(a process forked after its parent used the GPU cannot use it: start such "
        "processes with the spawn or forkserver start method)"
    )
    assert isinstance(info.value.__cause__, ValueError)


# -- discovery ------------------------------------------------------------------


def _lib(directory: Path, name: str = "libamdhip64.so") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(b"")
    return directory / name


@pytest.fixture
def clean_env(monkeypatch):
    for spec in (_runtime.HIP, _runtime.CUDA):
        for var in (spec.override, *spec.homes):
            monkeypatch.delenv(var, raising=False)
    # No real runtime may answer, whether already loaded (torch loads CUDA's
    # when another test imports it) or from the system loader.
    monkeypatch.setattr(_runtime, "_loaded", lambda spec: None)
    monkeypatch.setattr(_runtime, "_system", lambda spec: None)
    return monkeypatch


def test_discovery_follows_the_spec_order(clean_env, tmp_path):
    m = clean_env
    rocm_path, rocm_home = _lib(tmp_path / "rp" / "lib"), _lib(tmp_path / "rh" / "lib")
    override = _lib(tmp_path / "mine", "libamdhip64.so.6")
    with pytest.raises(RuntimeError, match="no HIP runtime found.*LOADERX_HIP_LIBRARY"):
        _runtime.find(_runtime.HIP)
    m.setenv("ROCM_HOME", str(tmp_path / "rh"))
    assert _runtime.find(_runtime.HIP) == str(rocm_home)
    m.setenv("ROCM_PATH", str(tmp_path / "rp"))
    assert _runtime.find(_runtime.HIP) == str(rocm_path)
    m.setenv("LOADERX_HIP_LIBRARY", str(override))
    assert _runtime.find(_runtime.HIP) == str(override)
    m.setenv("LOADERX_HIP_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(RuntimeError, match="LOADERX_HIP_LIBRARY=.*missing.so' is not a file"):
        _runtime.find(_runtime.HIP)


def test_versioned_names_count_and_the_shortest_wins(clean_env, tmp_path):
    lib = tmp_path / "cuda" / "lib64"
    _lib(lib, "libcudart.so.12.4.127")
    _lib(lib, "libcudart.so.12")
    _lib(lib, "libcudart_static.a")
    clean_env.setenv("CUDA_PATH", str(tmp_path / "cuda"))
    assert _runtime.find(_runtime.CUDA) == str(lib / "libcudart.so.12")


def _fake_distribution(site: Path, name: str, files: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    for f in files:
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_bytes(b"")


def test_package_owned_runtimes_are_found_and_two_are_refused(clean_env, tmp_path):
    site = tmp_path / "site"
    _fake_distribution(site, "rocm-sdk-core", ["_rocm_sdk_core/lib/libamdhip64.so"])
    clean_env.syspath_prepend(str(site))
    want = os.path.realpath(site / "_rocm_sdk_core/lib/libamdhip64.so")
    assert _runtime.find(_runtime.HIP) == want
    # A toolkit root comes first.
    clean_env.setenv("ROCM_PATH", str(tmp_path / "rp"))
    _lib(tmp_path / "rp" / "lib")
    assert _runtime.find(_runtime.HIP) == str(tmp_path / "rp" / "lib" / "libamdhip64.so")
    clean_env.delenv("ROCM_PATH")
    other = tmp_path / "other"
    _fake_distribution(other, "torch", ["torch/lib/libamdhip64.so"])
    clean_env.syspath_prepend(str(other))
    with pytest.raises(RuntimeError, match="several installed packages ship a HIP runtime"):
        _runtime.find(_runtime.HIP)


def test_a_loaded_runtime_wins_and_no_framework_is_imported(fake_runtime, tmp_path):
    loaded = tmp_path / "libamdhip64.so"
    shutil.copy(fake_runtime, loaded)
    code = textwrap.dedent(
        f"""
        import ctypes, os, sys
        os.environ["LOADERX_HIP_LIBRARY"] = {str(fake_runtime)!r}
        ctypes.CDLL({str(loaded)!r})
        from loaderx.allocator import amdgpu
        a = amdgpu.Allocator()
        assert a.library == {str(loaded)!r}, a.library
        bad = [m for m in ("torch", "jax") if m in sys.modules]
        assert not bad, bad
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_importing_loaderx_discovers_nothing():
    code = (
        "import sys, loaderx, loaderx.zrecord, loaderx.dataloader, loaderx.allocator.cuda, "
        "loaderx.allocator.amdgpu; "
        "maps = open('/proc/self/maps').read(); "
        "print([m for m in ('torch', 'jax') if m in sys.modules], "
        "[n for n in ('libcudart', 'libamdhip64') if n in maps])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"


def test_host_allocator_reports_the_cpu(stores):
    a = host_alloc.Allocator()
    assert a.device == (1, 0)
    assert "host.Allocator(device=(1, 0), live=0" in repr(a)
