"""The Loader: alignment, splitting, execution policy, memory bound, close,
errors and exact resume."""

import gc
import os
import threading
import time

import numpy as np
import pytest

from conftest import host
from loaderx.allocator import host as host_alloc
from loaderx.dataloader import Loader
from loaderx.zrecord import Dense, Ragged, RaggedBatch

N = 997


class Strided:
    """A custom sampler: batch k is ((k * B + i) * 7919) % N, from one reused buffer."""

    def __init__(self, batch_size, n=N):
        self.batch_size, self.n, self.step = batch_size, n, 0
        self.buf = np.empty(batch_size, np.uint64)
        self.draws = 0

    def next(self):
        i = np.arange(self.step * self.batch_size, (self.step + 1) * self.batch_size)
        self.buf[:] = (i * 7919) % self.n
        self.step += 1
        self.draws += 1
        return self.buf

    def seek(self, step):
        self.step = step

    def config(self):
        return ("strided", self.batch_size, self.n)

    def batch(self, k):
        i = np.arange(k * self.batch_size, (k + 1) * self.batch_size)
        return (i * 7919) % self.n


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    """Three aligned streams whose records encode their own id."""
    root = tmp_path_factory.mktemp("streams")
    ids = np.arange(N, dtype=np.int64)
    with Dense.create(root / "label", np.int64, (), codec="zstd") as w:
        w.append(ids)
    with Dense.create(root / "x", np.float32, (2, 3), codec="raw") as w:
        w.append((ids[:, None, None] * np.ones((1, 2, 3))).astype(np.float32))
    with Ragged.create(root / "tok", np.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records([np.full(i % 5, i, np.int32) for i in range(N)]))
    readers = {
        "label": Dense.open(root / "label"),
        "x": Dense.open(root / "x"),
        "tok": Ragged.open(root / "tok"),
    }
    yield readers
    for r in readers.values():
        r.close()


def check_aligned(shard, want_ids):
    ids = host(shard["label"])
    assert ids.tolist() == list(want_ids)
    assert np.array_equal(host(shard["x"])[:, 0, 0], ids.astype(np.float32))
    toks = shard["tok"].to_tensors()
    assert [host(t).tolist() for t in toks] == [[i] * (i % 5) for i in ids]


@pytest.mark.parametrize("bindings", [1, 2, 4])
@pytest.mark.parametrize("workers", [0, 1, 3])
def test_aligned_contiguous_split(streams, bindings, workers):
    s = Strided(16)
    st = {k: [r] * bindings for k, r in streams.items()}
    with Loader(st, s, workers=workers, prefetch=2) as loader:
        for k in range(12):
            shards = next(loader)
            assert isinstance(shards, list) and len(shards) == bindings
            want = s.batch(k)
            per = 16 // bindings
            for i, shard in enumerate(shards):
                assert set(shard) == {"label", "x", "tok"}
                check_aligned(shard, want[i * per : (i + 1) * per])


def test_singleton_binding_gives_a_one_element_list(streams):
    with Loader({"label": [streams["label"]]}, Strided(4), workers=0) as loader:
        out = loader.next()
        assert len(out) == 1 and out[0]["label"].shape == (4,)


def test_bound_readers_fill_their_allocators(streams):
    a0, a1 = host_alloc.Allocator(), host_alloc.Allocator()
    st = {"label": [streams["label"].bind(a0), streams["label"].bind(a1)]}
    with Loader(st, Strided(8), workers=0) as loader:
        shards = next(loader)
        assert a0.stats().live == 1 and a1.stats().live == 1
        assert host(shards[0]["label"]).tolist() == Strided(8).batch(0)[:4].tolist()


def test_transform_gets_the_whole_list_once_per_batch(streams):
    calls = []

    def collate(shards):
        calls.append(len(shards))
        return ("collated", sum(len(s["label"]) for s in shards))

    for workers in (0, 2):
        calls.clear()
        with Loader(
            {"label": [streams["label"]] * 2}, Strided(8), transform=collate, workers=workers
        ) as loader:
            outs = [next(loader) for _ in range(10)]
        assert outs == [("collated", 8)] * 10
        assert calls[:10] == [2] * 10 and len(calls) <= 10 + workers + 4


def test_endless_iteration(streams):
    s = Strided(64, n=N)
    with Loader({"label": [streams["label"]]}, s, workers=2) as loader:
        for k, shards in enumerate(loader):
            assert host(shards[0]["label"]).tolist() == s.batch(k).tolist()
            if k == 3 * N // 64:  # well past one pass over the data
                break


def test_construction_errors(streams):
    lab = streams["label"]
    cases = [
        (([lab],), TypeError, "streams must be a dict"),
        (({},), ValueError, "streams is empty"),
        (({"label": []},), ValueError, "stream 'label' has no readers"),
        (({"label": lab},), TypeError, "stream 'label' must be a list"),
        (
            ({"label": [lab], "x": [streams["x"]] * 2},),
            ValueError,
            "stream 'x' has 2 bindings but 'label' has 1",
        ),
        (({"label": [object()]},), TypeError, "stream 'label' holds a object"),
    ]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            Loader(*args, Strided(4))
    with pytest.raises(ValueError, match="batch size 6 does not divide by the 4 bindings"):
        Loader({"label": [lab] * 4}, Strided(6))
    with pytest.raises(ValueError, match="prefetch must be >= 1, got 0"):
        Loader({"label": [lab]}, Strided(4), prefetch=0)
    with pytest.raises(TypeError, match="prefetch must be an integer"):
        Loader({"label": [lab]}, Strided(4), prefetch=2.0)
    # 2**63 raised NumPy's "Maximum allowed dimension exceeded", 2**40 its
    # MemoryError, and 10**8 took a quarter of a second and 763 MiB to make.
    for huge in (2**16 + 1, 2**40, 2**63):
        with pytest.raises(ValueError, match=rf"prefetch must be at most 65536, got {huge}"):
            Loader({"label": [lab]}, Strided(4), prefetch=huge)
    assert Loader({"label": [lab]}, Strided(4), prefetch=2**16).prefetch == 2**16
    with pytest.raises(ValueError, match=r"workers must be in 0..1024, got -1"):
        Loader({"label": [lab]}, Strided(4), workers=-1)
    # A count no machine runs is refused, not started thread by thread.
    with pytest.raises(ValueError, match=r"workers must be in 0..1024, got 1180591620717411303424"):
        Loader({"label": [lab]}, Strided(4), workers=2**70)
    assert Loader({"label": [lab]}, Strided(4), workers=1024).workers == 1024
    with pytest.raises(TypeError, match="transform must be callable"):
        Loader({"label": [lab]}, Strided(4), transform=3)
    with pytest.raises(TypeError, match="sampler must have a next"):
        Loader({"label": [lab]}, object())


def test_unequal_record_counts_are_refused(streams, tmp_path):
    with Dense.create(tmp_path / "short", np.int64, (), codec="raw") as w:
        w.append(np.arange(N - 1))
    with (
        Dense.open(tmp_path / "short") as short,
        pytest.raises(ValueError, match="stream 'short' has 996 records but 'label' has 997"),
    ):
        Loader({"label": [streams["label"]], "short": [short]}, Strided(4))


def test_prefetch_is_never_rewritten(streams):
    with Loader({"label": [streams["label"]]}, Strided(4), workers=7, prefetch=1) as loader:
        assert (loader.workers, loader.prefetch) == (7, 1)


@pytest.mark.parametrize("workers,prefetch", [(1, 1), (2, 3), (4, 2)])
def test_live_batches_are_bounded_while_the_consumer_is_slow(streams, workers, prefetch):
    a = host_alloc.Allocator()
    st = {"label": [streams["label"].bind(a)], "x": [streams["x"].bind(a)]}
    with Loader(st, Strided(8), workers=workers, prefetch=prefetch) as loader:
        held = next(loader)
        time.sleep(0.3)  # the workers fill every slot they may
        live = a.stats().live
        # Two streams per batch; the consumer holds one batch.
        assert live <= 2 * (workers + prefetch + 1)
        assert live >= 2 * (prefetch + 1)  # it did prefetch
        del held
        for _ in range(20):
            next(loader)
            time.sleep(0.01)
            assert a.stats().live <= 2 * (workers + prefetch + 1)


def test_close_is_prompt_when_workers_block_on_a_full_queue(streams):
    loader = Loader({"label": [streams["label"]]}, Strided(4), workers=4, prefetch=1)
    next(loader)
    time.sleep(0.2)
    t0 = time.perf_counter()
    loader.close()
    loader.close()
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(ValueError, match="the loader is closed"):
        next(loader)


class Boom(Exception):
    pass


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_transform_exceptions_reach_the_consumer_in_step_order(streams, workers):
    def transform(shards):
        if host(shards[0]["label"])[0] == Strided(4).batch(5)[0]:
            raise Boom("bad batch")
        return shards

    loader = Loader({"label": [streams["label"]]}, Strided(4), transform=transform, workers=workers)
    for _ in range(5):
        next(loader)
    with pytest.raises(Boom, match="bad batch") as info:
        next(loader)
    assert any(f.name == "transform" for f in info.traceback)
    with pytest.raises(RuntimeError, match="stopped at step 5 after an error"):
        next(loader)
    loader.close()


def test_gather_exceptions_reach_the_consumer(streams):
    class OutOfRange(Strided):
        def next(self):
            out = super().next()
            out[0] = 10**9
            return out

    for workers in (0, 2):
        loader = Loader({"label": [streams["label"]]}, OutOfRange(4), workers=workers)
        with pytest.raises(IndexError, match="out of range"):
            next(loader)
        loader.close()


class Watched:
    """A reader that records, for every gather, how many gathers overlapped it and
    whether its positions were a view of the sampler's buffer."""

    def __init__(self, reader, sampler_buf):
        self.reader, self.buf = reader, sampler_buf
        self.lock, self.running, self.overlaps, self.views = threading.Lock(), 0, [], []

    def __len__(self):
        return len(self.reader)

    def gather(self, idx):
        with self.lock:
            self.running += 1
            self.overlaps.append(self.running)
        self.views.append(np.shares_memory(idx, self.buf))
        time.sleep(0.005)  # long enough for other workers to try a gather meanwhile
        try:
            return self.reader.gather(idx)
        finally:
            with self.lock:
                self.running -= 1


@pytest.mark.parametrize("workers", [1, 4])
def test_workers_gather_one_at_a_time_from_the_drawn_buffer(streams, workers):
    s = Strided(8)
    reader = Watched(streams["label"], s.buf)
    with Loader({"label": [reader, reader]}, s, workers=workers, prefetch=2) as loader:
        for k in range(24):
            shards = next(loader)
            assert [host(sh["label"]).tolist() for sh in shards] == [
                s.batch(k)[:4].tolist(),
                s.batch(k)[4:].tolist(),
            ]
    assert len(reader.overlaps) >= 48
    assert max(reader.overlaps) == 1
    assert all(reader.views)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int16, np.uint8, np.int64])
@pytest.mark.parametrize("workers", [0, 2])
def test_user_samplers_may_return_any_integer_positions(streams, dtype, workers):
    class Narrow(Strided):
        def next(self):
            return super().next().astype(dtype)[::-1]  # reversed: not contiguous

    s = Narrow(6, n=200)
    with Loader({"label": [streams["label"]] * 2}, s, workers=workers, prefetch=1) as loader:
        for k in range(5):
            got = [host(sh["label"]).tolist() for sh in next(loader)]
            assert got == [s.batch(k)[::-1][:3].tolist(), s.batch(k)[::-1][3:].tolist()]


def test_non_integer_positions_are_a_type_error(streams):
    class Floats(Strided):
        def next(self):
            return super().next().astype(np.float64)

    for workers in (0, 2):
        loader = Loader({"label": [streams["label"]]}, Floats(4), workers=workers)
        with pytest.raises(TypeError, match="float64 positions; expected integers"):
            next(loader)
        loader.close()


@pytest.mark.parametrize("workers", [0, 1, 4])
def test_resume_is_exact_after_1000_steps(streams, workers):
    st = {"label": [streams["label"]] * 2, "tok": [streams["tok"]] * 2}

    def ids(shards):
        return [host(s["label"]).tolist() for s in shards]

    with Loader(st, Strided(8), workers=workers, prefetch=3) as a:
        for _ in range(1000):
            next(a)
        state = a.state_dict()
        want = [ids(next(a)) for _ in range(25)]
    assert state["step"] == 1000 and state["version"] == 3
    with Loader(st, Strided(8), workers=workers, prefetch=3) as b:
        b.load_state_dict(state)
        got = [ids(next(b)) for _ in range(25)]
    assert got == want


def test_resume_refuses_another_configuration_and_late_calls(streams):
    st = {"label": [streams["label"]]}
    with Loader(st, Strided(8), workers=0) as a:
        next(a)
        state = a.state_dict()
        with pytest.raises(RuntimeError, match="before the first next"):
            a.load_state_dict(state)
    with Loader(st, Strided(4), workers=0) as b, pytest.raises(ValueError, match="sampler"):
        b.load_state_dict(state)
    with Loader(st, Strided(8), workers=0) as c:
        with pytest.raises(ValueError, match="version"):
            c.load_state_dict({**state, "version": 99})
        with pytest.raises(ValueError, match="state\\['step'\\] must be >= 0"):
            c.load_state_dict({**state, "step": -1})


def rss_kib():
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def test_20000_steps_without_growth(streams):
    # Stated bound: after warm-up, live allocations stay within the loader's limit
    # and RSS grows by less than 16 MiB over 20,000 steps.
    a = host_alloc.Allocator()
    st = {"label": [streams["label"].bind(a)] * 2, "tok": [streams["tok"].bind(a)] * 2}
    with Loader(st, Strided(16), workers=2, prefetch=2) as loader:
        for _ in range(500):
            next(loader)
        gc.collect()
        base = rss_kib()
        for _ in range(20_000):
            next(loader)
        gc.collect()
        grown = rss_kib() - base
        assert a.stats().live <= 4 * (2 + 2 + 1)
    assert grown < 16 * 1024, f"RSS grew by {grown} KiB"
    gc.collect()
    assert a.stats().live == 0


def test_real_sampler_batch_size_is_checked_at_construction(streams):
    from loaderx.sampler import Sampler

    with pytest.raises(ValueError, match="batch size 6 does not divide by the 4 bindings"):
        Loader({"label": [streams["label"]] * 4}, Sampler(N, 6, Sampler.Mode.IID, seed=1))


@pytest.mark.parametrize("mode", ["IID", "CYCLIC", "SEQUENTIAL"])
@pytest.mark.parametrize("workers", [0, 1, 4])
def test_resume_with_the_real_sampler(streams, mode, workers):
    from loaderx.sampler import Sampler

    def make():
        return Sampler(N, 32, Sampler.Mode[mode], seed=42)

    st = {"label": [streams["label"]] * 2, "x": [streams["x"]] * 2}

    def ids(shards):
        return np.concatenate([host(s["label"]) for s in shards]).tolist()

    with Loader(st, make(), workers=workers) as a:
        seen = [ids(next(a)) for _ in range(1000)]
        state = a.state_dict()
        want = [ids(next(a)) for _ in range(20)]
    assert state["sampler"] == [N, 32, mode, 42]
    reference = make()
    assert seen[:3] == [reference.next().tolist() for _ in range(3)]
    with Loader(st, make(), workers=workers) as b:
        b.load_state_dict(state)
        assert [ids(next(b)) for _ in range(20)] == want
    with Loader(st, Sampler(N, 32, Sampler.Mode[mode], seed=43), workers=0) as c:
        with pytest.raises(ValueError, match="seed|sampler"):
            c.load_state_dict(state)
