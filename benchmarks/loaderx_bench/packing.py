"""Benchmark: PackingSampler's fill and plan cost on the real token records.

Builds a Ragged store (raw codec, in a temporary directory) from the GPT-2 token
records that ``scripts/prepare_tokens.py`` writes to ``data/tokens``, reads every
record's length with ``Ragged.lengths()`` (from the index alone), then, for
``tokens_per_pack`` 1024, 2048 and 8192 and each mode's plan (CYCLIC and IID
share one plan; SEQUENTIAL has its own):

* the fill: the share of the plan's pack slots that hold tokens,
  ``sum(min(length, budget)) / (packs * budget)``, checked against the packs one
  whole pass of ``next()`` returns (every record once, no pack over budget);
* the plan cost: wall-clock time of the constructor per record (median of
  ``--repeats``), for the real lengths and for the real lengths repeated to
  ``--large`` records.

Figures depend only on the records and the algorithm except the plan cost, which
depends on the machine and its load (both printed).

Usage: python scripts/bench_packing.py [--repeats 3] [--large 10000000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import checkout, load_average, machine
from loaderx_bench.paths import DATA

BUDGETS = (1024, 2048, 8192)
PACKS_PER_STEP = 8
SEED = 0


def token_store(work: Path) -> Path:
    from loaderx.zrecord import Ragged, RaggedBatch

    src = DATA / "tokens"
    toks = np.load(src / "tokens.npy", mmap_mode="r")
    offs = np.load(src / "offsets.npy")
    lengths = np.diff(offs).astype(np.uint64).reshape(-1, 1)
    cu = (offs - offs[0]).astype(np.int32)
    with Ragged.create(work / "tokens", toks.dtype, ndim=1, codec="raw") as w:
        w.append(RaggedBatch(np.ascontiguousarray(toks[offs[0] : offs[-1]]), cu, lengths))
    return work / "tokens"


def plan_seconds(lengths: np.ndarray, budget: int, mode: object, repeats: int) -> float:
    from loaderx.sampler import PackingSampler

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        PackingSampler(lengths, budget, PACKS_PER_STEP, mode, seed=SEED)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def check_one_pass(sampler: object, lengths: np.ndarray, budget: int) -> float:
    """Draws one whole pass; returns the fill of its packs (must equal the plan's)."""
    from loaderx.sampler import PackingSampler

    assert isinstance(sampler, PackingSampler)
    packs = sampler.packs_per_pass
    cost = np.minimum(lengths, np.uint64(budget))
    seen = np.zeros(len(lengths), np.int64)
    tokens = 0
    sampler.seek(0)
    drawn = 0
    while drawn < packs:
        positions = sampler.next()
        offsets = sampler.pack_offsets
        take = min(PACKS_PER_STEP, packs - drawn)
        mine = positions[: offsets[take]]
        sums = np.add.reduceat(cost[mine], offsets[:take])
        assert (sums <= budget).all(), "a pack over budget"
        np.add.at(seen, mine, 1)
        tokens += int(sums.sum())
        drawn += take
    assert (seen == 1).all(), "a pass that does not hold every record once"
    return tokens / (packs * budget)


def main(argv: list[str]) -> int:
    from loaderx.sampler import PackingSampler, Sampler
    from loaderx.zrecord import Ragged

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--large", type=int, default=10_000_000)
    args = ap.parse_args(argv)
    if not (DATA / "tokens" / "tokens.npy").exists():
        print(f"no token records at {DATA / 'tokens'}: run python scripts/prepare_tokens.py")
        return 2
    print(f"machine: {machine()}")
    print(f"checkout: {checkout()}; load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        with Ragged.open(token_store(Path(tmp))) as store:
            t0 = time.perf_counter()
            lengths = store.lengths()
            read = time.perf_counter() - t0
    n = len(lengths)
    print(
        f"records: {n} real GPT-2 token records (data/tokens), mean length "
        f"{lengths.mean():.1f}, max {lengths.max()}; Ragged.lengths() read them in "
        f"{read * 1e3:.1f} ms"
    )
    reps = -(-args.large // n)
    large = np.tile(lengths, reps)[: args.large]
    print()
    print(
        f"{'tokens_per_pack':>15} {'plan':>10} {'packs':>8} {'fill':>7} "
        f"{'plan ns/record':>15} {f'at {args.large:,} records':>22}"
    )
    for budget in BUDGETS:
        for mode in (Sampler.Mode.CYCLIC, Sampler.Mode.SEQUENTIAL):
            s = PackingSampler(lengths, budget, PACKS_PER_STEP, mode, seed=SEED)
            fill = check_one_pass(s, lengths, budget)
            assert abs(fill - s.fill) < 1e-12, (fill, s.fill)
            small = plan_seconds(lengths, budget, mode, args.repeats) / n * 1e9
            big = plan_seconds(large, budget, mode, max(1, args.repeats // 2)) / len(large) * 1e9
            name = "CYCLIC/IID" if mode is Sampler.Mode.CYCLIC else "SEQUENTIAL"
            print(
                f"{budget:>15} {name:>10} {s.packs_per_pass:>8} {fill:>7.2%} "
                f"{small:>15.1f} {big:>22.1f}"
            )
    print(f"\nload average after: {load_average()}")
    return 0
