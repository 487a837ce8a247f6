"""Shutdown: close() returns only once no worker runs loaderx or user code, and a
script that ends right after using a loader exits cleanly, whatever its transform
does."""

import gc
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from loaderx.dataloader import Loader
from loaderx.zrecord import Dense

N = 64
RUNS = 20


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("shutdown") / "x"
    with Dense.create(path, np.float32, (64, 64), codec="raw") as w:
        w.append(np.ones((N, 64, 64), np.float32))
    return str(path)


@pytest.fixture
def reader(store):
    with Dense.open(store) as r:
        yield r


class Counting:
    """A sampler whose batch k is positions 4k..4k+3 (mod N)."""

    def __init__(self):
        self.step = 0

    def next(self):
        out = (np.arange(4 * self.step, 4 * self.step + 4) % N).astype(np.uint64)
        self.step += 1
        return out


# The script imports loaderx after registering its own exit hook, so the hook runs
# after loaderx's (exit hooks run last-registered first) and sees what is left.
SCRIPT = """
import atexit, sys, threading, time

inside = [0]
lock = threading.Lock()

def report(when):
    alive = sorted(t.name for t in threading.enumerate() if t.name.startswith("loaderx"))
    print(f"{when}: inside={inside[0]} workers={alive}", flush=True)

atexit.register(report, "exit")

import numpy as np
from loaderx.dataloader import Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense

kind, path, ending = sys.argv[1:4]

if kind == "torch":
    import torch

    weights = torch.randn(64, 64)

    def work(shards):
        x = torch.from_dlpack(shards[0]["x"])
        for _ in range(20):
            x = torch.tanh(x @ weights)
        return x

elif kind == "busy":

    def work(shards):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:
            pass
        return shards

elif kind == "sleep":

    def work(shards):
        time.sleep(0.02)
        return shards

elif kind == "numpy":
    big = np.ones((200, 200))

    def work(shards):
        return big @ big @ big

def transform(shards):
    with lock:
        inside[0] += 1
    try:
        return work(shards)
    finally:
        with lock:
            inside[0] -= 1

reader = Dense.open(path)
sampler = Sampler(len(reader), 16, Sampler.Mode.IID, seed=1)
if ending == "with":
    with Loader({"x": [reader]}, sampler, transform=transform, workers=3, prefetch=2) as loader:
        for _ in range(2):
            next(loader)
    report("closed")
else:
    loader = Loader({"x": [reader]}, sampler, transform=transform, workers=3, prefetch=2)
    for _ in range(2):
        next(loader)
"""


def run_many(tmp_path, store, kind, ending, runs=RUNS):
    """Runs the script `runs` times, two at a time; returns (rc, stdout, stderr)s."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    results = []
    for first in range(0, runs, 2):
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), kind, store, ending],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(min(2, runs - first))
        ]
        for p in procs:
            out, err = p.communicate(timeout=120)
            results.append((p.returncode, out, err))
    return results


KINDS = [
    "busy",  # holds the GIL
    "sleep",  # releases it
    "numpy",  # releases it inside BLAS
    "torch",
]


@pytest.mark.parametrize("kind", KINDS)
def test_a_script_ending_after_the_loader_block_exits_cleanly(tmp_path, store, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    results = run_many(tmp_path, store, kind, "with")
    clean = (0, "closed: inside=0 workers=[]\nexit: inside=0 workers=[]\n", "")
    assert results == [clean] * RUNS


@pytest.mark.parametrize("kind", KINDS)
def test_a_script_ending_with_an_open_loader_exits_cleanly(tmp_path, store, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    results = run_many(tmp_path, store, kind, "open", runs=6)
    assert results == [(0, "exit: inside=0 workers=[]\n", "")] * 6


def consume_in_thread(loader):
    """Starts a thread blocked in loader.next(); returns it and the messages of the
    ValueErrors it gets."""
    errors = []

    def consume():
        try:
            loader.next()
        except ValueError as e:
            errors.append(str(e))

    t = threading.Thread(target=consume)
    t.start()
    return t, errors


def recording(seconds=0.0, started=None):
    """A transform that sleeps, and the threads it ran on and the calls it finished."""
    threads, finished = set(), []

    def transform(shards):
        threads.add(threading.current_thread())
        if started is not None:
            started.set()
        time.sleep(seconds)
        finished.append(True)
        return shards

    return transform, threads, finished


def test_close_waits_for_a_worker_inside_the_transform(reader):
    started = threading.Event()
    transform, threads, finished = recording(0.5, started)
    loader = Loader({"x": [reader]}, Counting(), transform=transform, workers=2, prefetch=1)
    consumer, errors = consume_in_thread(loader)
    assert started.wait(5)
    t0 = time.perf_counter()
    loader.close()
    waited = time.perf_counter() - t0
    consumer.join(5)
    assert not consumer.is_alive() and errors == ["the loader is closed"]
    assert 0.2 < waited < 3.0
    assert threads and not any(t.is_alive() for t in threads)
    calls = len(finished)
    time.sleep(0.3)
    assert len(finished) == calls  # nothing ran after close returned


def test_a_waiting_consumer_wakes_while_close_waits_for_the_transform(reader):
    gate, entered = threading.Event(), threading.Event()

    def transform(shards):
        entered.set()
        gate.wait(10)
        return shards

    loader = Loader({"x": [reader]}, Counting(), transform=transform, workers=1)
    consumer, errors = consume_in_thread(loader)
    assert entered.wait(5)
    closer = threading.Thread(target=loader.close)
    closer.start()
    consumer.join(1.0)
    assert not consumer.is_alive() and errors == ["the loader is closed"]
    assert closer.is_alive()  # still waiting for the transform
    gate.set()
    closer.join(2.0)
    assert not closer.is_alive()


def test_close_is_prompt_when_workers_block_on_a_full_queue_and_joins_them(reader):
    transform, threads, _ = recording()
    loader = Loader({"x": [reader]}, Counting(), transform=transform, workers=4, prefetch=1)
    next(loader)
    time.sleep(0.2)
    t0 = time.perf_counter()
    loader.close()
    assert time.perf_counter() - t0 < 1.0
    assert len(threads) >= 1 and not any(t.is_alive() for t in threads)


def test_close_from_inside_the_transform_stops_the_loader(reader):
    holder, threads = {}, set()

    def transform(shards):
        threads.add(threading.current_thread())
        holder["loader"].close()
        return shards

    loader = Loader({"x": [reader]}, Counting(), transform=transform, workers=2)
    holder["loader"] = loader
    consumer, errors = consume_in_thread(loader)
    consumer.join(5)
    assert not consumer.is_alive() and errors == ["the loader is closed"]
    assert loader.closed
    loader.close()  # from outside: waits for whatever still runs
    assert threads and not any(t.is_alive() for t in threads)


def test_dropping_an_unclosed_loader_stops_its_workers(reader):
    transform, threads, _ = recording()
    loader = Loader({"x": [reader]}, Counting(), transform=transform, workers=3, prefetch=2)
    next(loader)
    del loader
    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads and not any(t.is_alive() for t in threads)
