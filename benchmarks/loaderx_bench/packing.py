"""Benchmark: sequence packing on the real token records, loaderx's PackingSampler
side by side with Grain's first-fit packing and with padding count batches.

Builds a Ragged store (raw codec, in a temporary directory) from the GPT-2 token
records that ``scripts/prepare_tokens.py`` writes to ``data/tokens`` and reads
every record's length with ``Ragged.lengths()`` (from the index alone). Then:

1. **The plan**, for ``tokens_per_pack`` 1024, 2048 and 8192 and each mode's plan
   (CYCLIC and IID share one plan; SEQUENTIAL has its own): the fill, the share of
   the plan's pack slots that hold tokens, checked against the packs one whole
   pass of ``next()`` returns (every record once, no pack over budget).
2. **Delivered packs**, for the same budgets and ``--packs`` packs per step: the
   fill and the real tokens per second that reach the consumer as
   ``(packs, tokens_per_pack)`` rows of tokens, segment ids and positions, for

   * ``loaderx``: a Loader over the store with a CYCLIC PackingSampler and a
     transform calling ``loaderx.packing.to_dense`` (``--workers`` threads);
   * ``grain t=T``: Grain's ``FirstFitPackIterDataset`` (``--grain-bins`` packing
     bins, bins shuffled) over a shuffled ``MapDataset`` whose record ``i`` is a
     slice of the same tokens in memory, read on ``T`` threads (``--grain-threads``:
     0, in the consumer's thread, and 16, Grain's default), batched by ``--packs``;
   * ``padded``: a Loader over the store with a CYCLIC count ``Sampler`` whose
     batches hold as many records as a step's packs hold on average, each batch
     padded to its longest record (``to_dense`` with one record per row).

   Each path's first steps are checked first: every segment's tokens are a record
   of the corpus (for loaderx and padding, exactly the record at its position),
   no pack over budget, positions counting from 0 in each segment. Then each is
   timed for ``--seconds`` after a warm-up step, in the order given.
3. **Plan cost and seek** at ``--sizes`` records (the real lengths repeated):
   the constructor's wall-clock time per record, and the time of ``seek(step)``
   followed by the ``next()`` it positions, at random steps.

Only the timings depend on the machine and its load (both printed).

Usage: python scripts/bench_packing.py [--seconds 2] [--sizes 1000000 100000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import checkout, load_average, machine
from loaderx_bench.packing_paths import delivered_table, seek_table
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


def plan_table(lengths: np.ndarray) -> None:
    from loaderx.sampler import PackingSampler, Sampler

    print(f"{'tokens_per_pack':>15} {'plan':>10} {'packs':>8} {'fill':>7}")
    for budget in BUDGETS:
        for mode in (Sampler.Mode.CYCLIC, Sampler.Mode.SEQUENTIAL):
            s = PackingSampler(lengths, budget, PACKS_PER_STEP, mode, seed=SEED)
            fill = check_one_pass(s, lengths, budget)
            assert abs(fill - s.fill) < 1e-12, (fill, s.fill)
            name = "CYCLIC/IID" if mode is Sampler.Mode.CYCLIC else "SEQUENTIAL"
            print(f"{budget:>15} {name:>10} {s.packs_per_pass:>8} {fill:>7.2%}")


def main(argv: list[str]) -> int:
    from loaderx.zrecord import Ragged

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packs", type=int, default=PACKS_PER_STEP, help="packs per step")
    ap.add_argument("--workers", type=int, default=2, help="the Loaders' worker threads")
    ap.add_argument("--grain-bins", type=int, default=PACKS_PER_STEP)
    ap.add_argument("--grain-threads", type=int, nargs="+", default=[0, 16])
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per path")
    ap.add_argument("--check-steps", type=int, default=5, help="steps checked per path")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 100_000_000])
    ap.add_argument("--seeks", type=int, default=1000, help="timed seeks per size")
    ap.add_argument("--only", choices=["plan", "delivered", "seek"], nargs="+")
    args = ap.parse_args(argv)
    if not (DATA / "tokens" / "tokens.npy").exists():
        print(f"no token records at {DATA / 'tokens'}: run python scripts/prepare_tokens.py")
        return 2
    parts = args.only or ["plan", "delivered", "seek"]
    print(f"machine: {machine()}")
    print(f"checkout: {checkout()}; load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = token_store(Path(tmp))
        with Ragged.open(path) as store:
            t0 = time.perf_counter()
            lengths = store.lengths()
            read = time.perf_counter() - t0
        n = len(lengths)
        print(
            f"records: {n} real GPT-2 token records (data/tokens), mean length "
            f"{lengths.mean():.1f}, max {lengths.max()}; Ragged.lengths() read them in "
            f"{read * 1e3:.1f} ms"
        )
        if "plan" in parts:
            print()
            plan_table(lengths)
        if "delivered" in parts:
            print()
            delivered_table(path, DATA / "tokens", lengths, BUDGETS, args)
    if "seek" in parts:
        print()
        seek_table(lengths, args.sizes, args.seeks)
    print(f"\nload average after: {load_average()}")
    return 0
