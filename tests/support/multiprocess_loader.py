"""The stores, loaders and child processes of tests/loader/test_multiprocess.py.

Run as a script, this is one process of a data-parallel group:

    python multiprocess_loader.py RUNTIME RANK WORLD PORT ROOT PEER [SAMPLER]

It joins the group through RUNTIME ("torch": a gloo process group, "jax": JAX's
distributed runtime on CPU) at 127.0.0.1:PORT and builds a Loader without
process arguments, so that the loader finds its slice from the runtime. It writes
to ROOT/WORLD-RANK.pkl what it gathered for steps 0..STEPS-1 and the state it
saved after WORLD steps (also as ROOT/state-WORLD.json from rank 0), then waits
for the state the group of PEER processes saved, resumes a new loader from it and
records RESUMED steps more: a resume on another number of processes.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from loaderx.dataloader import Loader, StepInfo
from loaderx.sampler import Sampler, WindowedSampler
from loaderx.zrecord import Dense, Ragged, RaggedBatch

RECORDS = 61
BATCH = 8
BINDINGS = 2
STEPS = 6
RESUMED = 3
SEED = 5
WAIT = 90  # seconds a child waits for its peers' state before giving up


def make_stores(root: Path) -> None:
    """A Dense store whose record r is [3r, 3r+1, 3r+2] and a Ragged one whose
    record r holds r % 4 copies of r: every value names its record."""
    with Dense.create(root / "x", np.int64, (3,), codec="zstd") as w:
        w.append(np.arange(3 * RECORDS, dtype=np.int64).reshape(RECORDS, 3))
    records = [np.full(r % 4, r, np.int32) for r in range(RECORDS)]
    with Ragged.create(root / "seq", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(records))


def sampler(kind: str = "cyclic") -> Sampler | WindowedSampler:
    """The group's sampler: CYCLIC, or ("windowed") a WindowedSampler of windows of
    12 records (groups of 4), whose batches straddle its passes."""
    if kind == "windowed":
        return WindowedSampler.from_sizes(
            RECORDS, RECORDS * 24, BATCH, seed=11, window_bytes=300, block_bytes=100
        )
    return Sampler(RECORDS, BATCH, Sampler.Mode.CYCLIC, seed=11)


def record(shards: list[dict[str, Any]], step: StepInfo) -> dict[str, Any]:
    """What a step delivered, as plain NumPy data and numbers."""
    seq = [s["seq"] for s in shards]
    return {
        "step": step.step,
        "x": np.concatenate([np.from_dlpack(s["x"]) for s in shards]),
        "seq": np.concatenate([np.from_dlpack(b.values) for b in seq]),
        "lengths": np.concatenate([np.diff(np.from_dlpack(b.cu_seqlens)) for b in seq]),
        "positions": step.positions.copy(),
        "offset": step.offset,
        "batch_size": step.batch_size,
        "process": (step.process_index, step.process_count),
        "step_draw": step.rng.random(),
        "record_draws": np.array([step.record_rng(j).random() for j in range(len(step.positions))]),
    }


def loader(root: Path, kind: str = "cyclic", **process: int) -> Loader[Any, dict[str, Any]]:
    streams: dict[str, list[Any]] = {
        "x": [Dense.open(root / "x") for _ in range(BINDINGS)],
        "seq": [Ragged.open(root / "seq") for _ in range(BINDINGS)],
    }
    return Loader(streams, sampler(kind), transform=record, workers=2, seed=SEED, **process)


def single_process(root: Path, steps: int, kind: str = "cyclic") -> list[dict[str, Any]]:
    """Steps 0..steps-1 of the whole global batch, gathered by one process."""
    with loader(root, kind, process_index=0, process_count=1) as ld:
        return [next(ld) for _ in range(steps)]


def joined(parts: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.concatenate([p[key] for p in parts])


def same_steps(parts_by_rank: list[list[dict[str, Any]]], want: list[dict[str, Any]]) -> None:
    """The processes' steps, joined in rank order, are the single-process steps."""
    assert [len(steps) for steps in parts_by_rank] == [len(want)] * len(parts_by_rank)
    world = len(parts_by_rank)
    for s, whole in enumerate(want):
        parts = [steps[s] for steps in parts_by_rank]
        assert [p["step"] for p in parts] == [whole["step"]] * world
        # Each process holds exactly its B/P rows, at offset rank*B/P: the slices
        # tile the global batch with no gap and no overlap.
        assert [p["offset"] for p in parts] == [r * BATCH // world for r in range(world)]
        assert [len(p["positions"]) for p in parts] == [BATCH // world] * world
        assert [p["batch_size"] for p in parts] == [BATCH] * world
        assert [p["process"] for p in parts] == [(r, world) for r in range(world)]
        for key in ("positions", "x", "seq", "lengths", "record_draws"):
            np.testing.assert_array_equal(joined(parts, key), whole[key], err_msg=key)
        # One generator per step, the same in every process.
        assert [p["step_draw"] for p in parts] == [whole["step_draw"]] * world


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # a peer polling for the file never reads half of it


def _check_jax_arrays(root: Path, world: int) -> int:
    """Builds global arrays of the x stream for the first steps with two
    shardings and checks every addressable shard against the single-process
    batch; returns how many shards it checked."""
    import jax
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from loaderx.jax import global_arrays

    # Process i's devices in row i: one row of the global batch per device along
    # "data", or (the second sharding) the process's slice replicated on both.
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    flat = NamedSharding(Mesh(np.array(devices), ("data",)), PartitionSpec("data"))
    grid = Mesh(np.array(devices).reshape(world, -1), ("data", "model"))
    replicated = NamedSharding(grid, PartitionSpec("data"))

    def to_jax(shards: list[dict[str, Any]], step: StepInfo) -> tuple[Any, Any]:
        dense = [{"x": s["x"]} for s in shards]
        return global_arrays(dense, flat, step)["x"], global_arrays(dense, replicated, step)["x"]

    want = single_process(root, 2)
    checked = 0
    streams = {"x": [Dense.open(root / "x") for _ in range(BINDINGS)]}
    with Loader(streams, sampler(), transform=to_jax, workers=0) as ld:
        for s in range(2):
            for array in next(ld):
                assert array.shape == want[s]["x"].shape, (array.shape, want[s]["x"].shape)
                for shard in array.addressable_shards:
                    np.testing.assert_array_equal(np.asarray(shard.data), want[s]["x"][shard.index])
                    checked += 1
                whole = multihost_utils.process_allgather(array, tiled=True)
                np.testing.assert_array_equal(np.asarray(whole), want[s]["x"])
    return checked


def main(argv: list[str]) -> None:
    runtime, rank, world, port, root, peer, *rest = argv
    kind = rest[0] if rest else "cyclic"
    rank_i, world_i, peer_i = int(rank), int(world), int(peer)
    where = Path(root)
    if runtime == "torch":
        import torch.distributed as dist

        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank_i, world_size=world_i
        )
    else:
        import jax

        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}", num_processes=world_i, process_id=rank_i
        )
    out: dict[str, Any] = {"pid": os.getpid()}
    with loader(where, kind) as ld:
        out["found"] = (ld.process_index, ld.process_count)
        # Each group saves at another step, so a resume from the peer's state
        # cannot pass by continuing from its own.
        steps = [next(ld) for _ in range(world_i)]
        out["state"] = ld.state_dict()
        steps += [next(ld) for _ in range(STEPS - world_i)]
    out["steps"] = steps
    if rank_i == 0:
        _write(where / f"state-{world_i}.json", json.dumps(out["state"]).encode())
    if runtime == "jax":
        out["jax_shards_checked"] = _check_jax_arrays(where, world_i)
    state_file = where / f"state-{peer_i}.json"
    deadline = time.monotonic() + WAIT
    while not state_file.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {state_file} after {WAIT} s")
        time.sleep(0.05)
    with loader(where, kind) as ld:
        ld.load_state_dict(json.loads(state_file.read_text()))
        out["resumed"] = [next(ld) for _ in range(RESUMED)]
    _write(where / f"{world_i}-{rank_i}.pkl", pickle.dumps(out))
    if runtime == "torch":
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
