"""PackingSampler(..., positions=): packing a given sequence of record positions
(a mixture's), against the reference, with its config, pickling, errors, and a
Loader resuming a packed mixture across process counts."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import packing_reference as pref
import pytest
from xxhash import xxh3_64_intdigest

from loaderx.dataloader import Loader, StepInfo
from loaderx.errors import InvalidArgumentError
from loaderx.sampler import MixtureSampler, PackingSampler, Sampler
from loaderx.zrecord import Dense

SEQ, IID, CYC = Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC


def lengths(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(rng.lognormal(3.0, 1.0, n), 400).astype(np.uint64)


def chosen(n: int, m: int, seed: int) -> np.ndarray:
    """`m` positions below `n`, with repeats."""
    return np.random.default_rng(seed).integers(0, n, m).astype(np.uint64)


@pytest.mark.parametrize("mode", [SEQ, IID, CYC])
@pytest.mark.parametrize(("n", "m"), [(1, 1), (40, 7), (500, 5000)])
def test_steps_are_the_reference_over_the_items_renamed(mode, n, m):
    ls, pos = lengths(n, n), chosen(n, m, m)
    s = PackingSampler(ls, 256, 3, mode, seed=5, positions=pos)
    plain = PackingSampler(ls[pos], 256, 3, mode, seed=5)
    plan = pref.plan(ls[pos].tolist(), 256, mode.name, 5)
    assert s.packs_per_pass == plain.packs_per_pass == len(plan)
    assert s.fill == plain.fill
    for step in [0, 1, 2, len(plan), 2**64 - 2]:
        s.seek(step)
        plain.seek(step)
        items, offsets = pref.step(plan, 3, mode.name, 5, step)
        got = s.next().tolist()
        assert got == [int(pos[j]) for j in items], step
        assert s.pack_offsets.tolist() == offsets
        assert plain.next().tolist() == items


def test_a_cyclic_pass_packs_every_item_once():
    ls, pos = lengths(300, 1), chosen(300, 2000, 2)
    s = PackingSampler(ls, 512, 4, CYC, seed=8, positions=pos)
    p = s.packs_per_pass
    seen: list[int] = []
    for _ in range(p // 4):
        seen.extend(s.next().tolist())
    rest = p % 4
    if rest:
        last = s.next()
        seen.extend(last[: s.pack_offsets[rest]].tolist())
    assert sorted(seen) == sorted(pos.tolist())


def test_config_pickling_and_copies_name_the_positions():
    ls, pos = lengths(100, 3), chosen(100, 300, 4)
    s = PackingSampler(ls, 128, 2, CYC, seed=1, positions=pos)
    plain = PackingSampler(ls[pos], 128, 2, CYC, seed=1)
    config = s.config()
    want = plain.config()
    assert want["packing"] == {
        "records": 300,
        "lengths_xxh3": f"{xxh3_64_intdigest(ls[pos].astype('<u8').tobytes()):016x}",
    }
    want["packing"] = {
        "records": 300,
        "lengths_xxh3": f"{xxh3_64_intdigest(ls[pos].astype('<u8').tobytes()):016x}",
        "positions_xxh3": f"{xxh3_64_intdigest(pos.astype('<u8').tobytes()):016x}",
    }
    assert config == want
    other = PackingSampler(ls, 128, 2, CYC, seed=1, positions=pos[::-1].copy())
    assert other.config() != config
    for _ in range(3):
        s.next()
    again = PackingSampler(ls, 128, 2, CYC, seed=1, positions=pos)
    again.seek(3)
    want = [again.next().tolist() for _ in range(4)]
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s), copy.copy(s)):
        assert type(clone) is PackingSampler and clone.config() == config
        assert repr(clone) == repr(s)
        assert [clone.next().tolist() for _ in range(4)] == want
    assert repr(s).endswith("long='truncate', positions=<300 positions>) at step 3")


def test_a_pickle_resumes_at_its_step():
    ls, pos = lengths(60, 9), chosen(60, 90, 9)
    s = PackingSampler(ls, 100, 3, IID, seed=2, positions=pos)
    s.seek(41)
    clone = pickle.loads(pickle.dumps(s))
    assert [clone.next().tolist() for _ in range(3)] == [s.next().tolist() for _ in range(3)]


def test_positions_errors_name_the_argument():
    ls = np.array([3, 9, 1], np.uint64)
    with pytest.raises(
        InvalidArgumentError, match=r"^positions\[1\] is 3, outside the 3 records of lengths$"
    ):
        PackingSampler(ls, 4, 1, positions=[0, 3])
    with pytest.raises(InvalidArgumentError, match=r"^positions\[0\] is -1, outside"):
        PackingSampler(ls, 4, 1, positions=[-1])
    with pytest.raises(InvalidArgumentError, match="positions must hold at least one position"):
        PackingSampler(ls, 4, 1, positions=[])
    with pytest.raises(
        InvalidArgumentError, match=r"positions must be one-dimensional, got shape \(1, 2\)"
    ):
        PackingSampler(ls, 4, 1, positions=[[0, 1]])
    with pytest.raises(TypeError, match="positions must be integers, got dtype float64"):
        PackingSampler(ls, 4, 1, positions=[0.0])
    with pytest.raises(TypeError, match="positions must be a sequence of integers, got str"):
        PackingSampler(ls, 4, 1, positions="01")
    # long="error" names the record, not the item.
    with pytest.raises(
        InvalidArgumentError,
        match=r'^long="error": record 1 has length 9, over tokens_per_pack \(4\)$',
    ):
        PackingSampler(ls, 4, 1, long="error", positions=[2, 0, 1])
    assert PackingSampler(ls, 4, 1, long="error", positions=[2, 0]).packs_per_pass == 1


# -- a mixture, packed ------------------------------------------------------------

PARTS = [120, 60, 20]  # three corpora laid end to end
WEIGHTS = [5, 3, 2]
PASS = 400  # mixture draws per packing pass: a multiple of the weights' total


def mixture_positions() -> np.ndarray:
    mix = MixtureSampler.from_lengths(PARTS, WEIGHTS, PASS, [CYC, CYC, IID], seed=6)
    return mix.next().copy()


def corpus(position: int) -> int:
    return int(np.searchsorted(np.cumsum(PARTS), position, side="right"))


def test_a_packed_mixture_pass_holds_the_exact_shares():
    ls = lengths(sum(PARTS), 12)
    s = PackingSampler(ls, 256, 1, CYC, seed=3, positions=mixture_positions())
    for _ in range(2):  # two passes, each every draw of the mixture once
        seen = [r for _ in range(s.packs_per_pass) for r in s.next().tolist()]
        assert sorted(seen) == sorted(mixture_positions().tolist())
        # 400 draws in the shares 5 : 3 : 2.
        assert np.bincount([corpus(r) for r in seen], minlength=3).tolist() == [200, 120, 80]


def test_a_packed_mixture_resumes_from_json_on_another_process_count(tmp_path):
    ls = lengths(sum(PARTS), 12)
    with Dense.create(tmp_path / "id", np.int64, (), codec="raw") as w:
        w.append(np.arange(sum(PARTS), dtype=np.int64))

    def sampler() -> PackingSampler:
        return PackingSampler(ls, 256, 4, CYC, seed=3, positions=mixture_positions())

    def ids(shards, step: StepInfo):
        return step.step, np.from_dlpack(shards[0]["id"]).tolist()

    def run(steps, state=None, **process):
        with Loader(
            {"id": [Dense.open(tmp_path / "id")]}, sampler(), transform=ids, workers=1, **process
        ) as ld:
            if state is not None:
                ld.load_state_dict(state)
            return [next(ld) for _ in range(steps)], json.loads(json.dumps(ld.state_dict()))

    whole = sampler()
    want = [whole.next().tolist() for _ in range(6)]
    first = [run(3, process_index=r, process_count=2) for r in range(2)]
    assert first[0][1] == first[1][1] and first[0][1]["step"] == 3
    for s in range(3):
        assert first[0][0][s][1] + first[1][0][s][1] == want[s]
    rest = [run(3, first[0][1], process_index=r, process_count=4)[0] for r in range(4)]
    for s in range(3):
        assert [part[s][0] for part in rest] == [3 + s] * 4
        assert sum((part[s][1] for part in rest), []) == want[3 + s]
