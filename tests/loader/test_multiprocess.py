"""Data-parallel loading in real OS processes: groups of 2 and 4 processes joined
through torch.distributed (gloo) or JAX's distributed runtime on CPU, each
building a Loader that takes its rank and world size from the runtime. The two
groups run side by side and each resumes from the state the other saved; the
torch groups run again with a WindowedSampler.
tests/support/multiprocess_loader.py is the child process."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import multiprocess_loader as child
import pytest

import loaderx

HELPER = Path(child.__file__)
GROUPS = {2: 4, 4: 2}  # world size -> the world size whose state it resumes from
TIMEOUT = 180  # seconds for both groups together, a hung process fails the test


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(runtime: str, root: Path, kind: str) -> dict[tuple[int, int], dict[str, Any]]:
    """Runs both groups; returns each process's output by (world, rank)."""
    env = dict(os.environ)
    # The children import the loaderx this test imported, and run one thread each.
    package_root = str(Path(loaderx.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_root, env.get("PYTHONPATH", "")])
    env.update(OMP_NUM_THREADS="1", JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        for world, peer in GROUPS.items():
            port = free_port()
            for rank in range(world):
                log = root / f"{world}-{rank}.log"
                with open(log, "wb") as err:
                    args = [runtime, rank, world, port, root, peer, kind]
                    p = subprocess.Popen(
                        [sys.executable, str(HELPER), *map(str, args)],
                        env=env,
                        stdout=err,
                        stderr=subprocess.STDOUT,
                    )
                procs.append((f"{world}-{rank}", p, log))
        deadline = time.monotonic() + TIMEOUT
        while any(p.poll() is None for _, p, _ in procs):
            failed = [(n, p, log) for n, p, log in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = "failed" if failed else f"still running after {TIMEOUT} s"
                shown = failed or [(n, p, log) for n, p, log in procs if p.poll() is None]
                tails = "\n".join(f"--- {n}:\n{log.read_text()[-3000:]}" for n, _, log in shown)
                pytest.fail(f"child processes {why}:\n{tails}")
            time.sleep(0.05)
        for name, p, log in procs:
            assert p.returncode == 0, f"{name} exited {p.returncode}:\n{log.read_text()[-3000:]}"
    finally:
        for _, p, _ in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return {
        (world, rank): pickle.loads((root / f"{world}-{rank}.pkl").read_bytes())
        for world in GROUPS
        for rank in range(world)
    }


def run_groups(runtime: str, tmp_path_factory: pytest.TempPathFactory, kind: str = "cyclic"):
    root = tmp_path_factory.mktemp(f"dp-{runtime}-{kind}")
    child.make_stores(root)
    want = child.single_process(root, max(child.STEPS, max(GROUPS) + child.RESUMED), kind)
    return launch(runtime, root, kind), want


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    return run_groups("torch", tmp_path_factory)


@pytest.fixture(scope="module")
def jax_runs(tmp_path_factory):
    pytest.importorskip("jax", reason="jax is not installed")
    return run_groups("jax", tmp_path_factory)


@pytest.fixture(scope="module")
def windowed_runs(tmp_path_factory):
    """The torch groups with a WindowedSampler instead of CYCLIC."""
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    return run_groups("torch", tmp_path_factory, "windowed")


RUNTIMES = pytest.mark.parametrize("runtime", ["torch", "jax", "windowed"])


@RUNTIMES
def test_each_process_gathers_its_slice_of_every_global_batch(runtime, request):
    out, want = request.getfixturevalue(f"{runtime}_runs")
    if runtime == "windowed":  # the windowed groups do draw their sampler's batches
        direct = child.sampler("windowed")
        assert [w["positions"].tolist() for w in want] == [
            direct.next().tolist() for _ in range(len(want))
        ]
    for world in GROUPS:
        assert [out[world, r]["found"] for r in range(world)] == [(r, world) for r in range(world)]
        child.same_steps([out[world, r]["steps"] for r in range(world)], want[: child.STEPS])


@RUNTIMES
def test_a_state_saved_by_one_process_count_resumes_on_another(runtime, request):
    out, want = request.getfixturevalue(f"{runtime}_runs")
    for world, peer in GROUPS.items():
        states = [out[world, r]["state"] for r in range(world)]
        assert states[0]["step"] == world  # the group saved after `world` steps
        assert all(s == states[0] for s in states)  # one global state, every rank
        resumed = [out[world, r]["resumed"] for r in range(world)]
        # Resumed from the peer group's state, at the peer's step.
        child.same_steps(resumed, want[peer : peer + child.RESUMED])


def test_jax_global_arrays_hold_the_single_process_batch(jax_runs):
    out, _ = jax_runs
    for world in GROUPS:
        # Two steps, two shardings, two devices per process: eight shards, each
        # compared with its rows of the single-process batch.
        assert [out[world, r]["jax_shards_checked"] for r in range(world)] == [8] * world
