"""The Loader with a PackingSampler: steps split by whole packs between processes
and bindings, StepInfo.pack_offsets, the same packs with any number of workers
and processes, resume from JSON across process counts, and the divide checks."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from loaderx.dataloader import Loader, StepInfo, record_rng
from loaderx.errors import InvalidArgumentError
from loaderx.packing import to_dense
from loaderx.protocols import PackedSampler
from loaderx.sampler import PackingSampler, Sampler
from loaderx.zrecord import Dense, Ragged, RaggedBatch

RECORDS = 300
BUDGET = 64
PACKS = 8
SEED = 3


def lengths() -> np.ndarray:
    rng = np.random.default_rng(0)
    out = rng.integers(1, 50, RECORDS)
    out[::37] = 90  # longer than the budget: a pack of its own, cut by to_dense
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A Ragged store whose record r holds len(r) copies of r, and a Dense one
    whose record r is r: every value names its record."""
    path = tmp_path_factory.mktemp("packed")
    records = [np.full(n, r, np.int32) for r, n in enumerate(lengths())]
    with Ragged.create(path / "tokens", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(records))
    with Dense.create(path / "id", np.int64, (), codec="raw") as w:
        w.append(np.arange(RECORDS, dtype=np.int64))
    return path


def sampler(packs: int = PACKS, mode: Sampler.Mode = Sampler.Mode.CYCLIC) -> PackingSampler:
    return PackingSampler(lengths(), BUDGET, packs, mode, seed=SEED)


def record(shards: list[dict[str, Any]], step: StepInfo) -> dict[str, Any]:
    assert step.pack_offsets is not None
    return {
        "step": step.step,
        "positions": step.positions.copy(),
        "offset": step.offset,
        "batch_size": step.batch_size,
        "offsets": [o.copy() for o in step.pack_offsets],
        "ids": [np.from_dlpack(s["id"]).copy() for s in shards],
        "tokens": [
            to_dense(s["tokens"], o, BUDGET)["tokens"]
            for s, o in zip(shards, step.pack_offsets, strict=True)
        ],
        "draws": [step.record_rng(j).integers(2**63) for j in range(len(step.positions))],
    }


def run(root, steps, state=None, *, bindings=1, workers=0, packs=PACKS, **process):
    streams = {
        "tokens": [Ragged.open(root / "tokens") for _ in range(bindings)],
        "id": [Dense.open(root / "id") for _ in range(bindings)],
    }
    with Loader(
        streams, sampler(packs), transform=record, workers=workers, seed=7, **process
    ) as ld:
        if state is not None:
            ld.load_state_dict(state)
        out = [next(ld) for _ in range(steps)]
        return out, json.loads(json.dumps(ld.state_dict()))


def global_steps(count: int, packs: int = PACKS) -> list[tuple[np.ndarray, np.ndarray]]:
    """The sampler's own steps: positions and pack offsets."""
    s = sampler(packs)
    return [(s.next().astype(np.int64), s.pack_offsets.copy()) for _ in range(count)]


def check_part(got: dict[str, Any], want: tuple[np.ndarray, np.ndarray], rank: int, world: int):
    """One process's step is its contiguous run of the global step's packs, each
    binding an equal part of it with offsets relative to its records."""
    positions, offsets = want
    bindings = len(got["offsets"])
    per = PACKS // (world * bindings)
    first = rank * per * bindings
    a, b = int(offsets[first]), int(offsets[first + per * bindings])
    assert got["offset"] == a and got["batch_size"] == len(positions)
    np.testing.assert_array_equal(got["positions"], positions[a:b])
    for i in range(bindings):
        lo = first + i * per
        rel = offsets[lo : lo + per + 1] - offsets[lo]
        assert got["offsets"][i].dtype == np.int64
        assert got["offsets"][i].tolist() == rel.tolist()
        mine = positions[offsets[lo] : offsets[lo + per]]
        assert got["ids"][i].tolist() == mine.tolist()
        for k in range(per):
            pack = positions[offsets[lo + k] : offsets[lo + k + 1]]
            row = np.concatenate([np.full(min(lengths()[r], BUDGET), r) for r in pack])
            assert got["tokens"][i][k, : len(row)].tolist() == row.tolist()
            assert not got["tokens"][i][k, len(row) :].any()
    assert got["draws"] == [record_rng(7, got["step"], a + j).integers(2**63) for j in range(b - a)]


def test_one_process_one_binding_gets_the_samplers_steps(root):
    got, state = run(root, 5)
    for s, (step, want) in enumerate(zip(got, global_steps(5), strict=True)):
        assert step["step"] == s
        np.testing.assert_array_equal(step["positions"], want[0])
        assert [o.tolist() for o in step["offsets"]] == [want[1].tolist()]
        check_part(step, want, 0, 1)
    assert state["step"] == 5 and state["sampler"] == sampler().config()


@pytest.mark.parametrize("workers", [1, 4])
def test_the_packs_do_not_depend_on_the_workers(root, workers):
    want, _ = run(root, 6, bindings=2)
    got, _ = run(root, 6, bindings=2, workers=workers)
    for a, b in zip(got, want, strict=True):
        assert a["offsets"][0].tolist() == b["offsets"][0].tolist()
        assert a["offsets"][1].tolist() == b["offsets"][1].tolist()
        np.testing.assert_array_equal(a["positions"], b["positions"])
        assert [t.tolist() for t in a["tokens"]] == [t.tolist() for t in b["tokens"]]
        assert a["draws"] == b["draws"]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_process_slices_are_whole_packs_that_tile_the_step(root, world):
    want = global_steps(6)
    parts = [
        run(root, 6, bindings=2, workers=2, process_index=r, process_count=world)[0]
        for r in range(world)
    ]
    for s, whole in enumerate(want):
        joined = np.concatenate([p[s]["positions"] for p in parts])
        np.testing.assert_array_equal(joined, whole[0])
        for r in range(world):
            check_part(parts[r][s], whole, r, world)


def test_a_state_saved_with_two_processes_resumes_with_one_and_four(root):
    states = [run(root, 3, bindings=2, process_index=r, process_count=2)[1] for r in range(2)]
    assert states[0] == states[1] and states[0]["step"] == 3
    want = global_steps(7)[3:]
    for world, bindings in ((1, 2), (4, 2)):
        parts = [
            run(
                root,
                4,
                states[0],
                bindings=bindings,
                workers=1,
                process_index=r,
                process_count=world,
            )[0]
            for r in range(world)
        ]
        for s in range(4):
            assert [p[s]["step"] for p in parts] == [3 + s] * world
            for r in range(world):
                check_part(parts[r][s], want[s], r, world)


def test_packs_that_do_not_divide_are_refused_at_construction(root):
    streams = {"id": [Dense.open(root / "id") for _ in range(4)]}
    with pytest.raises(
        InvalidArgumentError,
        match=r"the sampler's 6 packs per step do not divide by the 4 bindings of stream 'id'$",
    ):
        Loader(streams, sampler(6), workers=0)
    with pytest.raises(
        InvalidArgumentError,
        match=r"the sampler's 8 packs per step do not divide by the 3 processes x 4 bindings = 12 "
        r"of stream 'id' \(process count from arguments\)$",
    ):
        Loader(streams, sampler(8), workers=0, process_index=0, process_count=3)
    # 8 packs of a few records each: the record count is no concern.
    with Loader(streams, sampler(8), workers=0, process_index=1, process_count=2) as ld:
        shards = next(ld)
    want = global_steps(1)[0]
    ids = np.concatenate([np.from_dlpack(s["id"]) for s in shards])
    np.testing.assert_array_equal(ids, want[0][want[1][4] :])


def test_a_count_samplers_step_info_has_no_pack_offsets(root):
    seen = []

    def look(shards, step):
        seen.append(step.pack_offsets)
        return None

    streams = {"id": [Dense.open(root / "id")]}
    with Loader(
        streams, Sampler(RECORDS, 10, Sampler.Mode.CYCLIC), transform=look, workers=0
    ) as ld:
        next(ld)
    assert seen == [None]
    assert not isinstance(Sampler(RECORDS, 10, Sampler.Mode.CYCLIC), PackedSampler)
    assert isinstance(sampler(), PackedSampler)


def test_step_info_pack_offsets_are_read_only_copies(root):
    kept: list[StepInfo] = []

    def keep(shards, step):
        kept.append(step)
        return None

    streams = {"id": [Dense.open(root / "id") for _ in range(2)]}
    s = sampler()
    with Loader(streams, s, transform=keep, workers=0) as ld:
        next(ld)
        next(ld)
    want = global_steps(2)
    for info, (_, offsets) in zip(kept, want, strict=True):
        assert info.pack_offsets is not None and len(info.pack_offsets) == 2
        half = int(offsets[4])
        assert info.pack_offsets[0].tolist() == offsets[:5].tolist()
        assert info.pack_offsets[1].tolist() == (offsets[4:] - half).tolist()
        for o in info.pack_offsets:
            assert o.dtype == np.int64 and not o.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                o[0] = 1
        assert repr(info).endswith(f"positions={len(info.positions)}, packs=8, seed=0)")
    # The sampler's own offsets are those of the last draw only.
    assert s.pack_offsets.tolist() == want[1][1].tolist()


class _Custom:
    """A sampler of packs written without loaderx: two packs per step."""

    def __init__(self, offsets: list[int], packs: int = 2) -> None:
        self._offsets = np.array(offsets, np.int64)
        self._packs = packs

    def next(self) -> np.ndarray:
        return np.arange(int(self._offsets[-1]), dtype=np.uint64)

    @property
    def pack_offsets(self) -> np.ndarray:
        return self._offsets

    @property
    def packs_per_step(self) -> int:
        return self._packs


def test_any_packed_sampler_is_split_by_packs_and_its_offsets_are_checked(root):
    streams = {"id": [Dense.open(root / "id") for _ in range(2)]}
    got = []
    with Loader(
        streams, _Custom([0, 3, 4]), transform=lambda sh, st: (sh, st.pack_offsets), workers=0
    ) as ld:
        shards, offsets = next(ld)
    assert [np.from_dlpack(s["id"]).tolist() for s in shards] == [[0, 1, 2], [3]]
    assert [o.tolist() for o in offsets] == [[0, 3], [0, 1]]
    for bad, message in (
        ([0, 5, 4], r"must rise from 0 to its step's 4 positions, got \[0, 5, 4\]"),
        ([1, 2, 4], r"must rise from 0 to its step's 4 positions, got \[1, 2, 4\]"),
        ([0, 1, 2, 4], r"the sampler's step of 3 packs does not divide by 2 bindings"),
    ):
        with Loader(streams, _Custom(bad), workers=0) as ld:
            with pytest.raises(InvalidArgumentError, match=message):
                next(ld)
            got.append(bad)
    assert len(got) == 3


@pytest.mark.parametrize(
    ("packs", "error", "message"),
    [
        (2.0, TypeError, "the sampler's packs_per_step must be an integer, got float"),
        (None, TypeError, "the sampler's packs_per_step must be an integer, got NoneType"),
        ("2", TypeError, "the sampler's packs_per_step must be an integer, got str"),
        (True, TypeError, "the sampler's packs_per_step must be an integer, got bool"),
        (0, InvalidArgumentError, "the sampler's packs_per_step must be >= 1, got 0"),
        (-4, InvalidArgumentError, "the sampler's packs_per_step must be >= 1, got -4"),
    ],
)
def test_a_packed_samplers_count_that_is_no_integer_is_refused_at_construction(
    root, packs, error, message
):
    # Such a count was taken as none: the Loader was made, and split the steps
    # by packs anyway, failing at the first next().
    streams = {"id": [Dense.open(root / "id") for _ in range(2)]}
    with pytest.raises(error, match=message):
        Loader(streams, _Custom([0, 3, 4], packs), workers=0)
    with Loader(streams, _Custom([0, 3, 4], np.int64(2)), workers=0) as ld:
        assert [np.from_dlpack(s["id"]).tolist() for s in next(ld)] == [[0, 1, 2], [3]]


@pytest.mark.parametrize("workers", [0, 2])
def test_without_a_transform_each_binding_gathers_whole_packs(root, workers):
    # workers > 0 with no transform: the steps are begun ahead of the consumer.
    streams = {"id": [Dense.open(root / "id") for _ in range(2)]}
    want = global_steps(4)
    for rank in range(2):
        with Loader(streams, sampler(), workers=workers, process_index=rank, process_count=2) as ld:
            for positions, offsets in want:
                got = [np.from_dlpack(s["id"]).tolist() for s in next(ld)]
                cuts = offsets[rank * 4 : rank * 4 + 5 : 2]
                assert got == [
                    positions[a:b].tolist() for a, b in zip(cuts[:-1], cuts[1:], strict=True)
                ]
