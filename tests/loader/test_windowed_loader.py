"""The WindowedSampler behind a Loader: what it delivers is what the sampler
draws, its JSON resume state, process slices with elastic resume (in one process
here; tests/loader/test_multiprocess.py runs it in real process groups), and a
remote reader sized at open like the local one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS

from loaderx.dataloader import Loader
from loaderx.sampler import WindowedSampler
from loaderx.zrecord import Dense

N = 301
B = 8


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("windowed-loader") / "label"
    with Dense.create(path, np.int64, (), codec="zstd") as w:
        w.append(np.arange(N, dtype=np.int64))
    return path


def sampler(seed: int = 6) -> WindowedSampler:
    # Groups of 10 records, windows of 40: 8 windows per pass, the last short.
    return WindowedSampler.from_sizes(N, 30_100, B, seed=seed, window_bytes=4000, block_bytes=1000)


def labels(batch) -> list[int]:
    return np.concatenate([np.from_dlpack(s["label"]) for s in batch]).tolist()


def run(path, steps, state=None, **process):
    with Loader({"label": [Dense.open(path)] * 2}, sampler(), workers=2, **process) as ld:
        if state is not None:
            ld.load_state_dict(json.loads(json.dumps(state)))
        return [labels(next(ld)) for _ in range(steps)], ld.state_dict()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_delivers_the_draws_and_resumes_from_json(store, workers):
    streams = {"label": [Dense.open(store)] * 2}
    with Loader(streams, sampler(), workers=workers) as a:
        seen = [labels(next(a)) for _ in range(40)]  # past the first pass (37.6 steps)
        state = a.state_dict()
        want = [labels(next(a)) for _ in range(9)]
    direct = sampler()
    assert seen + want == [direct.next().tolist() for _ in range(49)]
    assert state["sampler"] == json.loads(json.dumps(sampler().config()))
    with Loader(streams, sampler(), workers=workers) as b:
        b.load_state_dict(json.loads(json.dumps(state)))
        assert [labels(next(b)) for _ in range(9)] == want
        assert b.state_dict()["step"] == 49


def test_the_loader_refuses_a_state_of_another_windowed_sampler(store):
    streams = {"label": [Dense.open(store)]}
    with Loader(streams, sampler(), workers=0) as a:
        next(a)
        state = a.state_dict()
    with Loader(streams, sampler(seed=7), workers=0) as b:
        with pytest.raises(ValueError, match="the state was taken with sampler"):
            b.load_state_dict(state)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_process_slices_tile_every_global_batch(store, world):
    direct = sampler()
    whole = [direct.next().tolist() for _ in range(45)]
    parts = [run(store, 45, process_index=r, process_count=world)[0] for r in range(world)]
    for s in range(45):
        assert sum((p[s] for p in parts), []) == whole[s]
        assert [len(p[s]) for p in parts] == [B // world] * world


def test_a_state_saved_on_two_processes_resumes_on_four_and_one(store):
    direct = sampler()
    whole = [direct.next().tolist() for _ in range(45)]
    states = [run(store, 36, process_index=r, process_count=2)[1] for r in range(2)]
    assert states[0] == states[1] and states[0]["step"] == 36
    for world in (4, 1):
        parts = [
            run(store, 9, states[0], process_index=r, process_count=world)[0] for r in range(world)
        ]
        for s in range(9):
            assert sum((p[s] for p in parts), []) == whole[36 + s]


def test_a_remote_reader_sizes_the_sampler_at_open_like_the_local_one(store, range_server):
    import shutil

    shutil.copytree(store, range_server.root / "label")
    local = Dense.open(store)
    remote = Dense.open(range_server.url + "/label", storage_options=HTTP_STORAGE_OPTIONS)
    range_server.reset_counts()
    a = WindowedSampler(remote, B, seed=3, window_bytes=4000)
    # Sizing the sampler reads nothing more from the server.
    assert range_server.requests() == 0
    b = WindowedSampler(local, B, seed=3, window_bytes=4000)
    assert a.config() == b.config()
    with Loader({"label": [remote] * 2}, a, workers=2) as ld:
        got = [labels(next(ld)) for _ in range(40)]
    assert got == [b.next().tolist() for _ in range(40)]
