"""PackingSampler: token-budget packs of whole records, exact against the
pure-Python reference, exact passes, seek, pickling, the Loader's resume state
and argument errors."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import packing_reference as pref
import pytest

from conftest import host
from loaderx import _native
from loaderx.dataloader import Loader
from loaderx.errors import InvalidArgumentError
from loaderx.sampler import PackingSampler, Sampler
from loaderx.zrecord import Ragged, RaggedBatch

SEQ, IID, CYC = Sampler.Mode.SEQUENTIAL, Sampler.Mode.IID, Sampler.Mode.CYCLIC
MODES = [SEQ, IID, CYC]
U64_MAX = 2**64 - 1


def token_lengths(n: int, seed: int, top: int = 700) -> np.ndarray:
    """Lengths shaped like text: many short records, a few long ones, some empty."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.lognormal(3.5, 1.0, n), top).astype(np.uint64)
    lengths[rng.random(n) < 0.02] = 0
    return lengths


def steps(s: PackingSampler, count: int) -> list[tuple[list[int], list[int]]]:
    out = []
    for _ in range(count):
        pos = s.next()
        out.append((pos.tolist(), s.pack_offsets.tolist()))
    return out


def packs_of(s: PackingSampler, count: int) -> list[list[int]]:
    """The next ``count`` steps' packs, in sequence order."""
    packs = []
    for positions, offsets in steps(s, count):
        packs.extend(positions[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True))
    return packs


def test_the_constants_are_the_documented_ones():
    assert _native.PACK_WINDOW == pref.WINDOW == 4096


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("n", "budget", "per_step", "seed"),
    [(1, 8, 1, 0), (5, 4, 3, 1), (300, 512, 2, 7), (9000, 2048, 5, 2**64 - 3)],
)
def test_steps_equal_the_reference(mode, n, budget, per_step, seed):
    lengths = token_lengths(n, n + budget)
    s = PackingSampler(lengths, budget, per_step, mode, seed=seed)
    plan = pref.plan(lengths.tolist(), budget, mode.name, seed)
    assert s.packs_per_pass == len(plan)
    assert sorted(r for p in plan for r in p) == list(range(n))
    rng = np.random.default_rng(n)
    wanted = [0, 1, 2, len(plan) // per_step, len(plan) // per_step + 1, U64_MAX - 1]
    wanted += rng.integers(0, 2**63, 4).tolist()
    for step in wanted:
        s.seek(step)
        got = s.next().tolist(), s.pack_offsets.tolist()
        assert got == pref.step(plan, per_step, mode.name, seed, step), step


def test_the_plan_check_values():
    # Eight records, budget 10, two packs per step: the values docs/sampler.md gives.
    lengths = [7, 5, 3, 3, 2, 6, 0, 12]
    seq = PackingSampler(lengths, 10, 2, SEQ)
    assert packs_of(seq, 3) == [[0], [1, 2], [3, 4], [5, 6], [7], [0]]
    cyc = PackingSampler(lengths, 10, 2, CYC, seed=0)
    assert pref.plan(lengths, 10, "CYCLIC", 0) == [[7, 6], [0, 2], [5, 3], [1, 4]]
    assert cyc.packs_per_pass == 4 and cyc.fill == 36 / 40
    assert packs_of(cyc, 4) == [[1, 4], [7, 6], [5, 3], [0, 2], [5, 3], [0, 2], [1, 4], [7, 6]]
    iid = PackingSampler(lengths, 10, 2, IID, seed=0)
    assert packs_of(iid, 2) == [[0, 2], [0, 2], [1, 4], [1, 4]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("budget", [1, 64, 2048])
def test_no_pack_exceeds_the_budget(mode, budget):
    lengths = token_lengths(5000, budget, top=3000)
    s = PackingSampler(lengths, budget, 7, mode, seed=3)
    cost = np.minimum(lengths, budget)
    for _ in range(s.packs_per_pass // 7 + 2):
        positions = s.next().copy()
        offsets = s.pack_offsets
        assert offsets[0] == 0 and offsets[-1] == len(positions)
        sums = np.add.reduceat(cost[positions], offsets[:-1]) if len(positions) else []
        assert (np.diff(offsets) >= 1).all()
        assert (np.asarray(sums) <= budget).all()


@pytest.mark.parametrize("n", [1, 3, 4096, 4097, 10_001])
@pytest.mark.parametrize("per_step", [1, 4, 7])
def test_cyclic_passes_are_exact_across_their_boundaries(n, per_step):
    lengths = token_lengths(n, n)
    s = PackingSampler(lengths, 1024, per_step, CYC, seed=11)
    p = s.packs_per_pass
    count = (3 * p) // per_step + 2  # three whole passes, steps straddling them
    packs = packs_of(s, count)
    orders = []
    for c in range(3):
        one_pass = packs[c * p : (c + 1) * p]
        records = sorted(r for pack in one_pass for r in pack)
        assert records == list(range(n)), c
        orders.append([tuple(pack) for pack in one_pass])
    # The same packs every pass, in a fresh order (for more than a few packs).
    assert sorted(orders[0]) == sorted(orders[1]) == sorted(orders[2])
    if p > 5:
        assert orders[0] != orders[1] != orders[2]


def test_sequential_is_in_order_and_iid_reaches_every_pack():
    lengths = token_lengths(3000, 1)
    seq = PackingSampler(lengths, 256, 3, SEQ)
    flat = [r for pack in packs_of(seq, seq.packs_per_pass // 3) for r in pack]
    assert flat == list(range(len(flat)))
    iid = PackingSampler(lengths, 256, 50, IID, seed=4)
    seen = {tuple(p) for p in packs_of(iid, 200)}
    assert len(seen) == iid.packs_per_pass


@pytest.mark.parametrize("mode", MODES)
def test_the_pack_sequence_does_not_depend_on_packs_per_step(mode):
    lengths = token_lengths(2000, 5)
    one = packs_of(PackingSampler(lengths, 300, 1, mode, seed=9), 60)
    six = packs_of(PackingSampler(lengths, 300, 6, mode, seed=9), 10)
    assert one == six


@pytest.mark.parametrize("mode", MODES)
def test_seek_equals_replay(mode):
    s = PackingSampler(token_lengths(5000, 2), 512, 3, mode, seed=5)
    replay = steps(s, 400)
    rng = np.random.default_rng(0)
    for step in rng.integers(0, 400, 25).tolist() + [0, 399]:
        s.seek(step)
        assert (s.next().tolist(), s.pack_offsets.tolist()) == replay[step]


def test_the_buffers_are_reused():
    s = PackingSampler(token_lengths(1000, 3), 128, 4, CYC)
    first = s.next()
    offsets = s.pack_offsets
    second = s.next()
    assert s.pack_offsets is offsets and offsets.dtype == np.int64 and offsets.shape == (5,)
    assert first.dtype == np.uint64 and first.flags.c_contiguous
    assert np.shares_memory(first, second)
    assert first.__array_interface__["data"][0] == second.__array_interface__["data"][0]
    assert next(s).dtype == np.uint64 and iter(s) is s


@pytest.mark.parametrize("mode", MODES)
def test_pickle_and_copy_keep_the_step(mode):
    lengths = token_lengths(700, 6)
    s = PackingSampler(lengths, 200, 2, mode, seed=8, long="truncate")
    s.seek(41)
    for back in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert type(back) is PackingSampler and back.config() == s.config()
        assert steps(back, 3) == steps(copy.deepcopy(s), 3)
    assert repr(s) == (
        f"PackingSampler(<700 lengths>, tokens_per_pack=200, packs_per_step=2, "
        f"mode=Sampler.Mode.{mode.name}, seed=8, long='truncate') at step 41"
    )
    s.seek(U64_MAX)
    s.next()
    back = pickle.loads(pickle.dumps(s))
    with pytest.raises(OverflowError, match="last step"):
        back.next()
    back.seek(0)
    assert back.next().tolist() == PackingSampler(lengths, 200, 2, mode, seed=8).next().tolist()


def test_config_names_the_lengths_and_every_argument():
    lengths = np.array([5, 1, 9], np.uint64)
    s = PackingSampler(lengths, 10, 2, IID, seed=3, long="error")
    assert s.config() == {
        "packing": {"records": 3, "lengths_xxh3": s.config()["packing"]["lengths_xxh3"]},
        "tokens_per_pack": 10,
        "packs_per_step": 2,
        "mode": "IID",
        "seed": 3,
        "long": "error",
    }
    digest = s.config()["packing"]["lengths_xxh3"]
    assert isinstance(digest, str) and len(digest) == 16
    other = PackingSampler(np.array([5, 1, 8]), 10, 2, IID, seed=3, long="error")
    assert other.config()["packing"]["lengths_xxh3"] != digest
    assert PackingSampler([5, 1, 9], 10, 2, IID, seed=3, long="error").config() == s.config()
    assert (s.tokens_per_pack, s.packs_per_step, s.packs_per_pass) == (10, 2, 2)
    assert s.fill == 15 / 20
    # The sampler holds its own copy of the lengths.
    lengths[2] = 100
    assert s.config()["packing"]["lengths_xxh3"] == digest


def test_long_records_are_truncated_or_refused():
    lengths = [3, 40, 2, 10, 11]
    s = PackingSampler(lengths, 10, 5, SEQ)
    assert packs_of(s, 1) == [[0], [1], [2], [3], [4]]
    assert s.fill == (3 + 10 + 2 + 10 + 10) / 50
    with pytest.raises(
        InvalidArgumentError,
        match=r'^long="error": record 1 has length 40, over tokens_per_pack \(10\)$',
    ):
        PackingSampler(lengths, 10, 5, CYC, long="error")
    assert PackingSampler(lengths, 40, 5, CYC, long="error").packs_per_pass >= 2


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (([], 8, 1), {}, InvalidArgumentError, "lengths must hold at least one record"),
        (([[1, 2]], 8, 1), {}, InvalidArgumentError, r"lengths must be one-dimensional"),
        (([1.5, 2], 8, 1), {}, TypeError, "lengths must be integers, got dtype float64"),
        (([3, -1], 8, 1), {}, InvalidArgumentError, r"lengths\[1\] is negative \(-1\)"),
        (("abc", 8, 1), {}, TypeError, "lengths must be a sequence of integers, got str"),
        ((None, 8, 1), {}, TypeError, "lengths must be integers, got dtype object"),
        ((np.float64(3.0), 8, 1), {}, TypeError, "lengths must be integers, got dtype float64"),
        ((5, 8, 1), {}, InvalidArgumentError, r"lengths must be one-dimensional, got shape \(\)"),
        (([1], 0, 1), {}, InvalidArgumentError, r"tokens_per_pack must be an integer in \[1,"),
        (([1], 8.0, 1), {}, TypeError, "tokens_per_pack must be an integer, got float"),
        (([1], 8, 0), {}, InvalidArgumentError, r"packs_per_step must be an integer in \[1,"),
        (([1], 8, True), {}, TypeError, "packs_per_step must be an integer, not bool"),
        (([1], 8, 1), {"mode": 2}, TypeError, "mode must be a Sampler.Mode"),
        (([1], 8, 1), {"seed": -1}, InvalidArgumentError, r"seed must be an integer in \[0,"),
        (([1], 8, 1), {"long": "drop"}, InvalidArgumentError, 'long must be "truncate" or'),
        (([1], 8, 1), {"long": None}, TypeError, 'long must be "truncate" or'),
        (([1], 8, 2**62), {}, InvalidArgumentError, "does not fit in memory"),
    ],
)
def test_bad_arguments_are_refused(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        PackingSampler(*args, **kwargs)


def test_the_loader_resumes_from_its_json_state(tmp_path):
    lengths = token_lengths(400, 9)
    records = [np.full(int(n), i, np.int32) for i, n in enumerate(lengths)]
    with Ragged.create(tmp_path / "t", np.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(records))
    tokens = Ragged.open(tmp_path / "t")
    assert tokens.lengths().tolist() == lengths.tolist()

    def sampler():
        return PackingSampler(tokens.lengths(), 256, 3, CYC, seed=1)

    def firsts(shards):
        # Each record holds its own position, so a record's first element names it.
        b = shards[0]["t"]
        cu = host(b.cu_seqlens)
        return host(b.values)[cu[:-1][np.diff(cu) > 0]].tolist()

    with Loader({"t": [tokens]}, sampler(), workers=0) as loader:
        replay = [firsts(next(loader)) for _ in range(6)]
    want = sampler()
    for step in range(6):
        positions = want.next()
        assert replay[step] == [p for p in positions.tolist() if lengths[p] > 0]
    with Loader({"t": [tokens]}, sampler(), workers=2) as loader:
        for _ in range(2):
            next(loader)
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["sampler"] == sampler().config()
    with Loader({"t": [tokens]}, sampler(), workers=1) as loader:
        loader.load_state_dict(state)
        assert [firsts(next(loader)) for _ in range(4)] == replay[2:]
    other = PackingSampler(tokens.lengths(), 255, 3, CYC, seed=1)
    with Loader({"t": [tokens]}, other, workers=0) as loader:
        with pytest.raises(InvalidArgumentError, match="the state was taken with sampler"):
            loader.load_state_dict(state)
    tokens.close()
