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
    ] == [True, True, True, False]
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
