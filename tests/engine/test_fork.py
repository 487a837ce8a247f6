"""Readers survive fork(): a child (a PyTorch DataLoader worker, say) keeps using a
reader opened, and already gathered from, in the parent. A Loader whose worker
threads have started does not: in a forked child it fails at once."""

import multiprocessing as mp
import os
import re
import select
import signal
import time

import numpy as np
import pytest

from loaderx.dataloader import Loader
from loaderx.zrecord import Dense

DATA = np.arange(4000 * 256, dtype=np.int64).reshape(4000, 256)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_gather_in_forked_children(tmp_path, codec):
    with Dense.create(tmp_path / "s", np.int64, (256,), codec=codec) as w:
        w.append(DATA)
    store = Dense.open(tmp_path / "s")
    big = np.arange(0, 4000, 3)
    assert np.array_equal(np.from_dlpack(store[big]), DATA[big])  # parent's pool is running
    ctx = mp.get_context("fork")
    globals()["_STORE"] = store
    with ctx.Pool(2) as pool:
        outs = pool.map(_gather_global, [big, big[::-1], np.array([5, 5, 3999])])
    assert np.array_equal(outs[0], DATA[big])
    assert np.array_equal(outs[1], DATA[big[::-1]])
    assert np.array_equal(outs[2], DATA[[5, 5, 3999]])
    assert np.array_equal(np.from_dlpack(store[big]), DATA[big])  # parent still fine
    store.close()


def _gather_global(idx):
    return np.from_dlpack(globals()["_STORE"][idx]).copy()


def run_in_fork(child, timeout=20):
    """Runs child() in a forked child process and returns what it returned (a
    str), or fails if the child takes longer than `timeout` seconds."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            out = child()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = f"child raised {type(e).__name__}: {e}"
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the forked child did not answer within {timeout} s")
        chunks = []
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)


class Counting:
    """A sampler whose batch k is positions 2k, 2k+1."""

    def __init__(self):
        self.step = 0

    def next(self):
        out = np.arange(2 * self.step, 2 * self.step + 2, dtype=np.uint64)
        self.step += 1
        return out


@pytest.fixture
def small(tmp_path):
    with Dense.create(tmp_path / "s", np.int64, (256,), codec="zstd") as w:
        w.append(DATA)
    with Dense.open(tmp_path / "s") as store:
        yield store


def first_ids(shards):
    return np.from_dlpack(shards[0]["x"])[:, 0].tolist()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_loader_with_started_workers_fails_at_once_in_a_forked_child(small):
    loader = Loader({"x": [small]}, Counting(), workers=2, prefetch=4)
    assert first_ids(next(loader)) == [0, 256]
    time.sleep(0.2)  # the workers fill the queue the child inherits

    def child():
        out = []
        for attempt in (lambda: next(loader), lambda: iter(loader), loader.next):
            try:
                attempt()
                out.append("returned a batch")
            except RuntimeError as e:
                out.append(str(e))
        return "\n".join(out)

    parent = os.getpid()
    lines = run_in_fork(child).split("\n")
    assert len(lines) == 3 and len(set(lines)) == 1
    assert re.fullmatch(
        rf"this Loader's workers run in process {parent}, not in this forked child "
        r"\(process \d+\); create the loader after the fork",
        lines[0],
    )
    assert first_ids(next(loader)) == [512, 768]  # the parent's loader is unaffected
    loader.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_can_close_an_inherited_loader_and_make_its_own(small):
    loader = Loader({"x": [small]}, Counting(), workers=2, prefetch=4)
    next(loader)

    def child():
        loader.close()
        with Loader({"x": [small]}, Counting(), workers=2) as own:
            return repr([first_ids(next(own)) for _ in range(3)])

    assert run_in_fork(child) == "[[0, 256], [512, 768], [1024, 1280]]"
    loader.close()


def test_a_loader_without_workers_continues_in_a_forked_child(small):
    loader = Loader({"x": [small]}, Counting(), workers=0)
    next(loader)

    def child():
        return repr([first_ids(next(loader)) for _ in range(2)])

    assert run_in_fork(child) == "[[512, 768], [1024, 1280]]"
    assert first_ids(next(loader)) == [512, 768]  # the child's steps were its own
    loader.close()
