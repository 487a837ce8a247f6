"""Loader and LoaderIterator: a loader has one iterator, so every way of
iterating it shares one sequence of steps and no step is delivered twice."""

import gc
import threading
import time

import numpy as np
import pytest

from conftest import host
from loaderx.dataloader import Loader, LoaderIterator
from loaderx.zrecord import Dense

N = 1000


@pytest.fixture(scope="module")
def label(tmp_path_factory):
    path = tmp_path_factory.mktemp("iter") / "label"
    with Dense.create(path, np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    with Dense.open(path) as r:
        yield r


class Counting:
    """A sampler whose batch k is positions 2k, 2k+1 (mod N)."""

    def __init__(self):
        self.step = 0

    def next(self):
        out = (np.arange(2 * self.step, 2 * self.step + 2) % N).astype(np.uint64)
        self.step += 1
        return out

    def seek(self, step):
        self.step = step


def step_of(shards):
    """The step a batch from Counting belongs to."""
    first = int(host(shards[0]["label"])[0])
    return first // 2


@pytest.mark.parametrize("workers", [0, 2])
def test_iter_returns_the_loaders_one_iterator(label, workers):
    with Loader({"label": [label]}, Counting(), workers=workers) as loader:
        it = iter(loader)
        assert isinstance(it, LoaderIterator)
        assert iter(loader) is it
        assert iter(it) is it
        assert repr(it) == "LoaderIterator(streams=['label'], step=0)"


@pytest.mark.parametrize("workers", [0, 3])
def test_every_way_of_iterating_shares_one_sequence(label, workers):
    with Loader({"label": [label]}, Counting(), workers=workers, prefetch=2) as loader:
        seen = []
        for shards in loader:
            seen.append(step_of(shards))
            if len(seen) == 2:
                break
        for shards in loader:  # a second loop continues where the first stopped
            seen.append(step_of(shards))
            if len(seen) == 4:
                break
        seen.append(step_of(next(loader)))
        seen.append(step_of(loader.next()))
        it = iter(loader)
        seen.append(step_of(next(it)))
        seen.append(step_of(it.next()))
        for a, b in zip(loader, loader, strict=True):
            seen.extend([step_of(a), step_of(b)])
            if len(seen) == 12:
                break
        assert seen == list(range(12))
        assert loader.state_dict()["step"] == 12
        assert it.state_dict() == loader.state_dict()


def test_state_moves_through_either_object(label):
    with Loader({"label": [label]}, Counting(), workers=2) as a:
        for _ in range(5):
            next(a)
        state = iter(a).state_dict()
    with Loader({"label": [label]}, Counting(), workers=2) as b:
        it = iter(b)
        it.load_state_dict(state)
        assert b.state_dict()["step"] == 5
        assert [step_of(next(b)) for _ in range(3)] == [5, 6, 7]


def test_closing_the_iterator_closes_the_loader(label):
    loader = Loader({"label": [label]}, Counting(), workers=2)
    it = iter(loader)
    next(it)
    it.close()
    assert it.closed and loader.closed
    assert repr(it) == "LoaderIterator(streams=['label'], closed)"
    with pytest.raises(ValueError, match="^the loader is closed$"):
        iter(loader)
    with pytest.raises(ValueError, match="^the loader is closed$"):
        next(loader)
    with pytest.raises(ValueError, match="^the loader is closed$"):
        next(it)


def test_a_closed_loader_cannot_be_iterated(label):
    with Loader({"label": [label]}, Counting(), workers=0) as loader:
        pass
    with pytest.raises(ValueError, match="^the loader is closed$"):
        for _ in loader:
            pass


def test_a_loop_over_a_temporary_loader_keeps_running(label):
    threads = set()

    def transform(shards):
        threads.add(threading.current_thread())
        return shards

    seen = []
    for shards in Loader({"label": [label]}, Counting(), transform=transform, workers=2):
        gc.collect()  # the Loader object itself is garbage by now
        seen.append(step_of(shards))
        if len(seen) == 30:
            break
    assert seen == list(range(30))
    del shards
    gc.collect()
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads and not any(t.is_alive() for t in threads)


@pytest.mark.parametrize("workers", [0, 2])
def test_two_threads_consuming_one_loader_split_the_steps(label, workers):
    with Loader({"label": [label]}, Counting(), workers=workers) as loader:
        got = [[], []]

        def consume(out):
            for _ in range(20):
                out.append(step_of(next(loader)))

        threads = [threading.Thread(target=consume, args=(g,)) for g in got]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert sorted(got[0] + got[1]) == list(range(40))
        assert got[0] == sorted(got[0]) and got[1] == sorted(got[1])
