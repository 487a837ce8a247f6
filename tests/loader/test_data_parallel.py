"""Data-parallel loading in one process: explicit process slices, where the rank
and world size come from, the checks on them, elastic resume, per-record random
generators, and loaderx.jax.global_arrays on this process's devices.
tests/loader/test_multiprocess.py runs the same in real process groups."""

from __future__ import annotations

import subprocess
import sys
import types

import multiprocess_loader as child
import numpy as np
import pytest

from loaderx.dataloader import Loader, StepInfo, record_rng
from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("dp")
    child.make_stores(path)
    return path


@pytest.fixture(scope="module")
def want(root):
    return child.single_process(root, 8)


def run(root, steps, state=None, **process):
    with child.loader(root, **process) as ld:
        if state is not None:
            ld.load_state_dict(state)
        return [next(ld) for _ in range(steps)], ld.state_dict()


def test_the_single_process_batch_is_the_samplers_records(want):
    sampler = child.sampler()
    for s, step in enumerate(want):
        positions = sampler.next().astype(np.int64)
        assert step["step"] == s and step["positions"].tolist() == positions.tolist()
        assert step["x"].tolist() == [[3 * r, 3 * r + 1, 3 * r + 2] for r in positions]
        assert step["lengths"].tolist() == [r % 4 for r in positions]
        assert step["seq"].tolist() == [r for r in positions for _ in range(r % 4)]
        assert (step["offset"], step["batch_size"], step["process"]) == (0, 8, (0, 1))


@pytest.mark.parametrize("world", [2, 4])
def test_explicit_process_slices_tile_every_global_batch(root, want, world):
    parts = [run(root, 8, process_index=r, process_count=world)[0] for r in range(world)]
    child.same_steps(parts, want)


def test_a_state_saved_with_two_processes_resumes_with_four_and_one(root, want):
    states = [run(root, 3, process_index=r, process_count=2)[1] for r in range(2)]
    assert states[0] == states[1] and states[0]["step"] == 3
    for world in (4, 1):
        parts = [
            run(root, 4, states[0], process_index=r, process_count=world)[0] for r in range(world)
        ]
        child.same_steps(parts, want[3:7])


def test_per_record_generators_ignore_processes_bindings_and_workers(root, want):
    def draws(shards, step):
        return [step.record_rng(j).integers(2**63) for j in range(len(step.positions))]

    def one_loader(bindings, workers, **process):
        streams = {"x": [Dense.open(root / "x") for _ in range(bindings)]}
        with Loader(
            streams, child.sampler(), transform=draws, workers=workers, seed=9, **process
        ) as ld:
            return [next(ld) for _ in range(4)]

    whole = one_loader(1, 0)
    for s, row in enumerate(whole):
        assert row == [record_rng(9, s, j).integers(2**63) for j in range(8)]
    assert one_loader(2, 3) == whole
    for world in (2, 4):
        parts = [
            one_loader(8 // world, 2, process_index=r, process_count=world) for r in range(world)
        ]
        assert [sum((p[s] for p in parts), []) for s in range(4)] == whole
    info = StepInfo(2, np.arange(4, dtype=np.uint64), 9, offset=4, batch_size=8)
    assert info.record_rng(3).random() == record_rng(9, 2, 7).random()
    with pytest.raises(InvalidArgumentError, match=r"j must be in 0\.\.3 .*got 4"):
        info.record_rng(4)


def test_step_info_names_the_slice(root):
    seen = []
    streams = {"x": [Dense.open(root / "x")] * 2}
    with Loader(
        streams,
        child.sampler(),
        transform=lambda sh, st: seen.append(st),
        workers=0,
        process_index=1,
        process_count=2,
    ) as ld:
        next(ld)
        assert repr(ld) == (
            "Loader(streams=['x'], bindings=2, workers=0, prefetch=4, seed=0, step=1, process=1/2)"
        )
        assert (ld.process_index, ld.process_count) == (1, 2)
    info = seen[0]
    assert (info.offset, info.batch_size, info.process_index, info.process_count) == (4, 8, 1, 2)
    assert info.positions.tolist() == child.sampler().next()[4:].tolist()
    assert repr(info) == (
        "StepInfo(step=0, positions=4, offset=4, batch_size=8, process=1/2, seed=0)"
    )


def test_process_arguments_are_checked(root):
    streams = {"x": [Dense.open(root / "x")] * 2}
    cases = [
        (
            {"process_index": 1},
            InvalidArgumentError,
            "process_index is given but process_count is not",
        ),
        (
            {"process_count": 2},
            InvalidArgumentError,
            "process_count is given but process_index is not",
        ),
        (
            {"process_index": 2, "process_count": 2},
            InvalidArgumentError,
            r"process_index 2 is not below process_count 2 \(arguments\)",
        ),
        (
            {"process_index": -1, "process_count": 2},
            InvalidArgumentError,
            "process_index must be >= 0, got -1",
        ),
        (
            {"process_index": 0, "process_count": 0},
            InvalidArgumentError,
            "process_count must be >= 1, got 0",
        ),
        (
            {"process_index": 0.0, "process_count": 2},
            TypeError,
            "process_index must be an integer, got float",
        ),
        (
            {"process_index": 0, "process_count": 3},
            InvalidArgumentError,
            r"the sampler's batch size 8 does not divide by the 3 processes x 2 bindings = 6 "
            r"of stream 'x' \(process count from arguments\)",
        ),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            Loader(streams, child.sampler(), **kwargs)


def test_a_batch_that_does_not_divide_is_refused_at_the_draw():
    class Unsized:  # a sampler whose batch size is known only once drawn
        def next(self):
            return np.arange(6, dtype=np.uint64)

    data = np.arange(12, dtype=np.int64)

    class Reader:
        def __len__(self):
            return 12

        def gather(self, positions):
            return data[positions]

    with Loader({"x": [Reader()]}, Unsized(), workers=0, process_index=0, process_count=4) as ld:
        with pytest.raises(
            InvalidArgumentError,
            match=r"the sampler's batch of 6 does not divide by 4 processes x 1 bindings = 4",
        ):
            next(ld)
    with Loader({"x": [Reader()]}, Unsized(), workers=0, process_index=2, process_count=3) as ld:
        assert next(ld)[0]["x"].tolist() == [4, 5]


def fake_jax(initialized: bool, index: int, count: int) -> types.ModuleType:
    jax = types.ModuleType("jax")
    jax.distributed = types.SimpleNamespace(is_initialized=lambda: initialized)  # type: ignore[attr-defined]
    jax.process_index = lambda: index  # type: ignore[attr-defined]
    jax.process_count = lambda: count  # type: ignore[attr-defined]
    return jax


def fake_torch_distributed(initialized: bool, rank: int, world: int) -> types.ModuleType:
    dist = types.ModuleType("torch.distributed")
    dist.is_available = lambda: True  # type: ignore[attr-defined]
    dist.is_initialized = lambda: initialized  # type: ignore[attr-defined]
    dist.get_rank = lambda: rank  # type: ignore[attr-defined]
    dist.get_world_size = lambda: world  # type: ignore[attr-defined]
    return dist


@pytest.mark.parametrize(
    ("jax", "torch", "found"),
    [
        (None, None, (0, 1)),
        (fake_jax(False, 1, 2), None, (0, 1)),
        (None, fake_torch_distributed(False, 1, 2), (0, 1)),
        (None, fake_torch_distributed(True, 3, 4), (3, 4)),
        (fake_jax(True, 1, 2), None, (1, 2)),
        # JAX first when both runtimes are initialised, torch when only it is.
        (fake_jax(True, 1, 2), fake_torch_distributed(True, 3, 4), (1, 2)),
        (fake_jax(False, 1, 2), fake_torch_distributed(True, 3, 4), (3, 4)),
    ],
)
def test_the_process_comes_from_an_initialised_runtime(root, monkeypatch, jax, torch, found):
    for name, module in (("jax", jax), ("torch.distributed", torch)):
        if module is None:
            monkeypatch.delitem(sys.modules, name, raising=False)
        else:
            monkeypatch.setitem(sys.modules, name, module)
    streams = {"x": [Dense.open(root / "x")] * 2}
    with Loader(streams, child.sampler(), workers=0) as ld:
        assert (ld.process_index, ld.process_count) == found
        rows = np.concatenate([np.from_dlpack(s["x"]) for s in next(ld)])
    index, count = found
    positions = child.sampler().next().astype(np.int64)
    mine = np.array_split(positions, count)[index]
    assert rows[:, 0].tolist() == (3 * mine).tolist()
    # Arguments win over a runtime.
    with Loader(streams, child.sampler(), workers=0, process_index=0, process_count=1) as ld:
        assert (ld.process_index, ld.process_count) == (0, 1)


def test_a_runtime_whose_world_does_not_divide_the_batch_is_named(root, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_torch_distributed(True, 0, 3))
    with pytest.raises(InvalidArgumentError, match=r"\(process count from torch.distributed\)"):
        Loader({"x": [Dense.open(root / "x")]}, child.sampler())


def test_a_runtime_that_reports_no_rank_is_an_error(root, monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake_torch_distributed(True, None, 2))
    with pytest.raises(RuntimeError, match="torch reported the process rank or count None"):
        Loader({"x": [Dense.open(root / "x")]}, child.sampler())


def test_loading_imports_no_framework(root):
    code = f"""
import sys
import loaderx
from loaderx.dataloader import Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense
with Loader({{"x": [Dense.open({str(root / "x")!r})]}}, Sampler(61, 8, Sampler.Mode.IID),
            workers=2, transform=lambda shards, step: step.record_rng(0).random()) as ld:
    next(ld)
    assert (ld.process_index, ld.process_count) == (0, 1)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "torch"))
assert not loaded, loaded
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- loaderx.jax -------------------------------------------------------------------


def test_global_arrays_on_one_process(root, want):
    jax = pytest.importorskip("jax", reason="jax is not installed")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from loaderx.jax import global_arrays

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
    streams = {"x": [Dense.open(root / "x") for _ in range(2)]}
    with Loader(
        streams,
        child.sampler(),
        workers=0,
        transform=lambda shards, step: global_arrays(shards, sharding, step),
    ) as ld:
        for s in range(3):
            out = next(ld)
            assert list(out) == ["x"] and out["x"].sharding == sharding
            np.testing.assert_array_equal(np.asarray(out["x"]), want[s]["x"])
    with Loader(streams, child.sampler(), workers=0) as ld:
        shards = next(ld)
    out = global_arrays(shards, {"x": sharding})  # no StepInfo: JAX's process 0 of 1
    np.testing.assert_array_equal(np.asarray(out["x"]), want[0]["x"])


def test_global_arrays_refuses_what_it_cannot_place(root):
    jax = pytest.importorskip("jax", reason="jax is not installed")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from loaderx.jax import global_arrays
    from loaderx.zrecord import Ragged

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
    streams = {"x": [Dense.open(root / "x")], "seq": [Ragged.open(root / "seq")]}
    with Loader(streams, child.sampler(), workers=0) as ld:
        shards = next(ld)
    with pytest.raises(TypeError, match="stream 'seq' binding 0 is a RaggedBatch"):
        global_arrays(shards, sharding)
    dense = [{"x": shards[0]["x"]}]
    with pytest.raises(InvalidArgumentError, match="sharding has no entry for stream 'x'"):
        global_arrays(dense, {"y": sharding})
    # Rows 4..8 of a batch of 8 cannot fill a device that holds the whole batch.
    half = StepInfo(
        0,
        np.arange(4, dtype=np.uint64),
        0,
        offset=4,
        batch_size=8,
        process_index=1,
        process_count=2,
    )
    x4 = [{"x": np.from_dlpack(shards[0]["x"])[:4]}]
    with pytest.raises(
        InvalidArgumentError,
        match=r"needs rows 0\.\.8 of the global batch of 8, "
        r"but this process holds rows 4\.\.8",
    ):
        global_arrays(x4, sharding, half)
    with pytest.raises(
        InvalidArgumentError, match="holds 8 records in this process, but the step gathered 4"
    ):
        global_arrays(dense, sharding, half)

    class OnDevice:
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    with pytest.raises(InvalidArgumentError, match=r"is in device memory \(DLPack device type 2\)"):
        global_arrays([{"x": OnDevice()}], sharding)
    with pytest.raises(InvalidArgumentError, match="binding 1 holds the streams"):
        global_arrays([{"x": 1}, {"y": 1}], sharding)


def test_a_mixture_samplers_batches_split_across_processes(root):
    from loaderx.sampler import MixtureSampler

    def mixture():
        return MixtureSampler([(0, 20), (20, 61)], [1, 3], 8, seed=4)

    def rows(index, count):
        streams = {"x": [Dense.open(root / "x")] * 2}
        with Loader(streams, mixture(), workers=1, process_index=index, process_count=count) as ld:
            return [np.concatenate([np.from_dlpack(s["x"]) for s in next(ld)]) for _ in range(5)]

    reference = mixture()
    whole = [3 * reference.next().astype(np.int64) for _ in range(5)]
    parts = [rows(r, 2) for r in range(2)]
    for s in range(5):
        assert np.concatenate([p[s] for p in parts])[:, 0].tolist() == whole[s].tolist()
    with pytest.raises(
        InvalidArgumentError, match=r"batch size 8 does not divide by the 3 processes x 2 "
    ):
        Loader({"x": [Dense.open(root / "x")] * 2}, mixture(), process_index=0, process_count=3)
