"""A Loader with workers, no transform and only local stores runs no worker
thread: the consumer begins the steps ahead and their gathers run in order on
the native background gather thread. Same batches, same order, the same bound
on live batches, prompt close, errors at their own step, and fork safety."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from loaderx import allocator
from loaderx.dataloader import Loader
from loaderx.errors import InvalidArgumentError, OutOfRangeError
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged, RaggedBatch

N = 300


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("ahead")
    ids = np.arange(N, dtype=np.int64)
    with Dense.create(root / "id", np.int64, (), codec="zstd") as w:
        w.append(ids)
    records = [np.full(1 + i % 7, i, np.int32) for i in range(N)]
    with Ragged.create(root / "seq", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(records))
    return Dense.open(root / "id"), Ragged.open(root / "seq"), records


def worker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("loaderx-worker")]


def ids_of(step) -> list[list[int]]:
    """Per binding: the Dense ids, which the Ragged records repeat."""
    return [np.from_dlpack(shard["id"]).tolist() for shard in step]


def ragged_of(step) -> list[list[list[int]]]:
    return [[np.from_dlpack(t).tolist() for t in shard["seq"].to_tensors()] for shard in step]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_steps_equal_the_threadless_loader_and_no_worker_thread_runs(stores, workers):
    ids, seq, _ = stores
    streams = {"id": [ids, ids], "seq": [seq, seq]}

    def run(w: int) -> tuple[list, list]:
        s = Sampler(N, 12, mode=Sampler.Mode.CYCLIC, seed=3)
        with Loader(streams, s, workers=w, prefetch=3) as loader:
            steps = [loader.next() for _ in range(60)]
            threads = worker_threads()
        return [(ids_of(x), ragged_of(x)) for x in steps], threads

    want, _ = run(0)
    got, threads = run(workers)
    assert got == want
    assert threads == []
    # The records are the ones the positions name.
    s = Sampler(N, 12, mode=Sampler.Mode.CYCLIC, seed=3)
    first = s.next().tolist()
    assert sum(want[0][0], []) == first
    assert [r[0] for shard in want[0][1] for r in shard] == first


def test_a_transform_keeps_the_worker_threads(stores):
    ids, _, _ = stores
    s = Sampler(N, 10, mode=Sampler.Mode.SEQUENTIAL)
    with Loader({"id": [ids]}, s, workers=2, transform=lambda shards: shards) as loader:
        loader.next()
        assert len(worker_threads()) == 2


def test_live_batches_stay_within_workers_plus_prefetch(stores):
    ids, _, _ = stores
    pool = allocator.host.Allocator()
    bound = ids.bind(pool)
    s = Sampler(N, 10, mode=Sampler.Mode.IID, seed=1)
    with Loader({"id": [bound]}, s, workers=2, prefetch=3) as loader:
        most = 0
        for _ in range(40):
            batch = loader.next()
            # This step, plus the ones begun ahead.
            most = max(most, pool.stats().live)
            del batch
        assert most <= 1 + 2 + 3
        assert loader.stats()["queue"]["capacity"] == 5
    assert pool.stats().live == 0


def test_close_cancels_the_steps_begun_ahead(stores):
    ids, _, _ = stores
    s = Sampler(N, 10, mode=Sampler.Mode.SEQUENTIAL)
    loader = Loader({"id": [ids]}, s, workers=1, prefetch=4)
    assert np.from_dlpack(loader.next()[0]["id"]).tolist() == list(range(10))
    t0 = time.perf_counter()
    loader.close()
    assert time.perf_counter() - t0 < 1.0
    assert loader._pipeline.begun == type(loader._pipeline.begun)()
    with pytest.raises(InvalidArgumentError, match="closed"):
        loader.next()


def test_close_from_another_thread_while_the_consumer_waits(stores):
    ids, _, _ = stores

    class Slow:
        """A sampler whose draws take long, so that close() comes mid-step."""

        batch_size = 10

        def __init__(self) -> None:
            self.inner = Sampler(N, 10, mode=Sampler.Mode.SEQUENTIAL)

        def next(self):
            time.sleep(0.05)
            return self.inner.next()

    loader = Loader({"id": [ids]}, Slow(), workers=1, prefetch=2)
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            while True:
                loader.next()
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    loader.close()
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], InvalidArgumentError)
    assert "closed" in str(errors[0])
    assert len(loader._pipeline.begun) == 0


def test_a_failing_draw_is_raised_at_its_own_step(stores):
    ids, _, _ = stores

    class FailsAt:
        batch_size = 5

        def __init__(self, k: int) -> None:
            self.k, self.n = k, 0

        def next(self):
            if self.n == self.k:
                raise ValueError(f"draw {self.n} failed")
            self.n += 1
            return np.arange(self.n * 5, self.n * 5 + 5, dtype=np.uint64) % N

    sampler = FailsAt(3)
    loader = Loader({"id": [ids]}, sampler, workers=1, prefetch=4)
    got = [np.from_dlpack(loader.next()[0]["id"]).tolist() for _ in range(3)]
    assert got == [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [15, 16, 17, 18, 19]]
    # Drawn ahead once, never again after it failed.
    assert sampler.n == 3
    with pytest.raises(ValueError, match="draw 3 failed"):
        loader.next()
    with pytest.raises(RuntimeError, match="stopped at step 3"):
        loader.next()
    loader.close()


def test_a_position_out_of_range_fails_its_step_only(stores):
    ids, _, _ = stores

    class Bad:
        batch_size = 2

        def __init__(self) -> None:
            self.n = 0

        def next(self):
            self.n += 1
            return np.array([0, N if self.n == 3 else 1], dtype=np.uint64)

    loader = Loader({"id": [ids]}, Bad(), workers=2, prefetch=2)
    assert np.from_dlpack(loader.next()[0]["id"]).tolist() == [0, 1]
    assert np.from_dlpack(loader.next()[0]["id"]).tolist() == [0, 1]
    with pytest.raises(OutOfRangeError, match=str(N)):
        loader.next()
    loader.close()


def test_resume_counts_delivered_steps_not_those_begun(stores):
    ids, _, _ = stores
    s = Sampler(N, 10, mode=Sampler.Mode.IID, seed=5)
    loader = Loader({"id": [ids]}, s, workers=2, prefetch=4)
    for _ in range(7):
        loader.next()
    state = loader.state_dict()
    assert state["step"] == 7
    want = [ids_of(loader.next()) for _ in range(5)]
    loader.close()
    again = Loader({"id": [ids]}, Sampler(N, 10, mode=Sampler.Mode.IID, seed=5), workers=1)
    again.load_state_dict(state)
    assert [ids_of(again.next()) for _ in range(5)] == want
    again.close()


def test_statistics_time_the_background_gathers(stores):
    ids, seq, _ = stores
    s = Sampler(N, 20, mode=Sampler.Mode.IID, seed=2)
    with Loader({"id": [ids], "seq": [seq]}, s, workers=1, prefetch=2) as loader:
        for _ in range(30):
            loader.next()
        st = loader.stats()
    assert st["steps"] == 30
    assert sorted(st["stages"]) == ["draw", "gather"]
    gather = st["stages"]["gather"]
    assert gather["total_s"] > 0 and 0 < gather["p50_s"] <= gather["p95_s"]
    assert st["queue"]["capacity"] == 3
    assert 0 <= st["queue"]["mean"] <= 3


def test_a_forked_child_refuses_the_parents_loader_and_runs_its_own(stores, tmp_path):
    script = textwrap.dedent(
        f"""
        import os, sys
        import numpy as np
        from loaderx.dataloader import Loader
        from loaderx.sampler import Sampler
        from loaderx.zrecord import Dense

        ids = Dense.open({str(stores[0].path)!r})
        loader = Loader({{"id": [ids]}}, Sampler({N}, 4, mode=Sampler.Mode.SEQUENTIAL), workers=1)
        loader.next()
        pid = os.fork()
        if pid == 0:
            try:
                loader.next()
                code = 3
            except RuntimeError as e:
                code = 0 if "forked child" in str(e) else 4
            if code == 0:
                own = Loader({{"id": [ids]}}, Sampler({N}, 4, mode=Sampler.Mode.SEQUENTIAL),
                             workers=2)
                got = [np.from_dlpack(own.next()[0]["id"]).tolist() for _ in range(3)]
                code = 0 if got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]] else 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        print(np.from_dlpack(loader.next()[0]["id"]).tolist())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split("\n")[:2] == ["0", "[4, 5, 6, 7]"]
