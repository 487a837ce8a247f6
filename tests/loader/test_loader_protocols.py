"""loaderx.protocols: what the Loader accepts, and that loaderx's own readers and
sampler satisfy it."""

import numpy as np
import pytest

from conftest import host
from loaderx.allocator import host as host_alloc
from loaderx.dataloader import Loader
from loaderx.protocols import (
    ConfiguredSampler,
    IndexSampler,
    Reader,
    SeekableSampler,
    SizedSampler,
)
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged, RaggedBatch

N = 12


@pytest.fixture(scope="module")
def readers(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocols")
    with Dense.create(root / "d", np.int64, (), codec="raw") as w:
        w.append(np.arange(N, dtype=np.int64))
    with Ragged.create(root / "r", np.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records([np.full(i % 3, i, np.int32) for i in range(N)]))
    d, r = Dense.open(root / "d"), Ragged.open(root / "r")
    yield d, r
    d.close()
    r.close()


class OnlyNext:
    """The least a sampler can be: next() and nothing else."""

    def __init__(self):
        self.step = 0

    def next(self):
        self.step += 1
        return np.array([self.step, self.step + 1], dtype=np.int32)


def test_loaderx_readers_and_sampler_satisfy_the_protocols(readers):
    d, r = readers
    bound = d.bind(host_alloc.Allocator())
    assert [isinstance(x, Reader) for x in (d, r, bound)] == [True, True, True]
    s = Sampler(N, 4, Sampler.Mode.CYCLIC, seed=1)
    assert [
        isinstance(s, p) for p in (IndexSampler, SeekableSampler, ConfiguredSampler, SizedSampler)
    ] == [True, True, True, True]
    assert [
        isinstance(OnlyNext(), p)
        for p in (IndexSampler, SeekableSampler, ConfiguredSampler, SizedSampler)
    ] == [True, False, False, False]
    assert not isinstance(object(), Reader) and not isinstance(object(), IndexSampler)


def test_a_sampler_with_only_next_loads_and_resumes_only_at_step_0(readers):
    d, _ = readers
    with Loader({"d": [d]}, OnlyNext(), workers=0) as a:
        assert host(next(a)[0]["d"]).tolist() == [1, 2]
        state = a.state_dict()
    assert state["sampler"] is None and state["step"] == 1
    with Loader({"d": [d]}, OnlyNext(), workers=0) as b:
        with pytest.raises(TypeError, match=r"^resuming needs a sampler with seek\(step\)$"):
            b.load_state_dict(state)
        b.load_state_dict({**state, "step": 0})
        assert host(next(b)[0]["d"]).tolist() == [1, 2]


def test_objects_that_miss_a_protocol_method_are_refused(readers):
    d, _ = readers

    class NoLen:
        def gather(self, positions):
            return d.gather(positions)

    class NextIsData:
        next = 3

    with pytest.raises(TypeError, match="^stream 'd' holds a NoLen, not an open Dense or Ragged"):
        Loader({"d": [NoLen()]}, OnlyNext())
    with pytest.raises(TypeError, match=r"^sampler must have a next\(\) method"):
        Loader({"d": [d]}, NextIsData())


class Prefetching:
    """A reader whose reads wait: prefetch() logs the step it begins and returns
    what completes it, logging that too. Positions equal to `fail_at` raise in
    prefetch, as a bad position does in a remote store's."""

    def __init__(self, log, fail_at=None, defer=True):
        self.log, self.fail_at, self.defer = log, fail_at, defer

    def __len__(self):
        return N

    def gather(self, positions):
        self.log.append(("gather", int(positions[0])))
        return positions.copy()

    def prefetch(self, positions):
        first = int(positions[0])
        if first == self.fail_at:
            raise IndexError(f"position {first} is out of range")
        if not self.defer:
            return None
        self.log.append(("begin", first))
        own = positions.copy()

        def complete():
            self.log.append(("complete", first))
            return own

        return complete


class Steps:
    """Step s draws [s, s]; the buffer is reused, as loaderx's sampler does."""

    batch_size = 2

    def __init__(self):
        self.step, self.buf = 0, np.zeros(2, np.int64)

    def next(self):
        self.buf[:] = self.step
        self.step += 1
        return self.buf


def test_a_prefetching_reader_has_the_steps_ahead_begun_before_the_first_completes():
    from loaderx.protocols import PrefetchingReader

    log = []
    reader = Prefetching(log)
    assert isinstance(reader, PrefetchingReader)
    with Loader({"x": [reader]}, Steps(), workers=1, prefetch=3) as loader:
        got = [next(loader)[0]["x"].tolist() for _ in range(6)]
    assert got == [[s, s] for s in range(6)]
    # workers + prefetch = 4 steps are begun at once, before the first completes.
    first = log.index(("complete", 0))
    assert log[:first] == [("begin", s) for s in range(4)]
    # Each step is begun, then completed, exactly once and in order.
    begun = [s for kind, s in log if kind == "begin"]
    done = [s for kind, s in log if kind == "complete"]
    assert begun == sorted(set(begun)) and done == list(range(len(done)))
    assert ("gather", 0) not in log


def test_a_reader_with_nothing_to_wait_for_is_gathered_one_step_at_a_time():
    log = []
    with Loader({"x": [Prefetching(log, defer=False)]}, Steps(), workers=1, prefetch=3) as loader:
        got = [next(loader)[0]["x"].tolist() for _ in range(3)]
    assert got == [[0, 0], [1, 1], [2, 2]]
    assert [kind for kind, _ in log] == ["gather"] * len(log)


def test_a_prefetch_error_reaches_the_consumer_at_its_step(readers):
    d, _ = readers
    log = []
    streams = {"x": [Prefetching(log, fail_at=2)], "d": [d]}
    for workers in (0, 2):
        with Loader(streams, Steps(), workers=workers, prefetch=2) as loader:
            assert host(next(loader)[0]["d"]).tolist() == [0, 0]
            assert next(loader)[0]["x"].tolist() == [1, 1]
            with pytest.raises(IndexError, match="position 2"):
                next(loader)
