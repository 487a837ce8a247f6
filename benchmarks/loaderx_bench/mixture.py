"""Benchmark: MixtureSampler's time per ``next()`` from Python.

Compares, in one run on the same machine, for 1,000,000 positions split into R
ranges of different lengths with weights unrelated to the lengths:

* ``loaderx.MixtureSampler`` over the R ranges (IID and CYCLIC traversal);
* ``loaderx.sampler.Sampler`` over all positions in the same mode: what the
  mixture adds to a plain draw;
* NumPy, what a mixture is commonly written as: ``rng.choice(R, B, p=weights)``
  for each slot's range, then ``rng.integers(0, lengths[r])`` within it (IID only,
  neither seekable nor exact in its shares).

Outputs are verified first: shape and dtype, every position inside the range its
slot was drawn for, each batch's counts per range within 5 of ``B * weight``
(MixtureSampler), ``seek`` against replay, and NumPy's counts within 5 binomial
standard deviations over all verified batches. Each figure is the median over
timed blocks of the mean time per call in a block of ``--block`` calls; the
contenders take turns for every (mode, R, B) in each round, so that changes in
machine load hit them alike. CPU time of the calling thread is the main figure
(the fill runs in that thread, with or without the GIL); wall-clock ratios are
printed beside it.

Usage: python scripts/bench_mixture.py [--rounds 3] [--block 200] [--blocks 25]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from loaderx_bench.machine import load_average, machine

LENGTH = 1_000_000
BATCHES = (64, 256, 4096, 65_536)
RANGE_COUNTS = (2, 16)
SEED = 42


def layout(r: int) -> tuple[list[tuple[int, int]], list[float]]:
    """R ranges tiling [0, LENGTH) with lengths 1, 2, ..., R (scaled) and weights
    R, R-1, ..., 1 (normalised): shares opposite to the lengths."""
    cuts = np.cumsum([0, *range(1, r + 1)]) * LENGTH // (r * (r + 1) // 2)
    ranges = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    weights = [float(r - i) / (r * (r + 1) / 2) for i in range(r)]
    return ranges, weights


def range_ids(values: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    starts = np.array([a for a, _ in ranges], dtype=np.uint64)
    ids = np.searchsorted(starts, values, side="right") - 1
    stops = np.array([b for _, b in ranges], dtype=np.uint64)
    if not ((ids >= 0) & (values < stops[ids])).all():
        raise SystemExit("a position outside every range")
    return ids


def verify(mode_name: str, r: int, b: int) -> None:
    from loaderx import MixtureSampler, Sampler

    mode = Sampler.Mode[mode_name]
    ranges, weights = layout(r)
    s = MixtureSampler(ranges, weights, b, mode, seed=SEED)
    batches = [s.next().copy() for _ in range(8)]
    for batch in batches:
        if batch.dtype != np.uint64 or batch.shape != (b,):
            raise SystemExit(f"MixtureSampler: {batch.dtype} {batch.shape}")
        counts = np.bincount(range_ids(batch, ranges), minlength=r)
        if np.abs(counts - b * np.array(weights)).max() > 5:
            raise SystemExit(f"MixtureSampler {mode_name} R={r} B={b}: counts {counts}")
    s.seek(5)
    if not np.array_equal(s.next(), batches[5]):
        raise SystemExit("MixtureSampler: seek(5) differs from the sixth draw")
    plain = Sampler(LENGTH, b, mode, seed=SEED).next()
    if plain.shape != (b,) or int(plain.max()) >= LENGTH:
        raise SystemExit("Sampler: unexpected output")
    if mode_name == "IID":
        draw = numpy_mixture(ranges, weights, b)
        drawn = np.concatenate([draw() for _ in range(8)])
        counts = np.bincount(range_ids(drawn, ranges), minlength=r)
        n, p = len(drawn), np.array(weights)
        if (np.abs(counts - n * p) > 5 * np.sqrt(n * p * (1 - p)) + 1).any():
            raise SystemExit(f"NumPy mixture: counts {counts} for shares {p}")


def numpy_mixture(
    ranges: list[tuple[int, int]], weights: list[float], b: int
) -> Callable[[], np.ndarray]:
    rng = np.random.default_rng(SEED)
    starts = np.array([a for a, _ in ranges], dtype=np.uint64)
    lengths = np.array([y - x for x, y in ranges], dtype=np.int64)
    p = np.array(weights)
    count = len(ranges)

    def draw() -> np.ndarray:
        r = rng.choice(count, size=b, p=p)
        return starts[r] + rng.integers(0, lengths[r]).astype(np.uint64)

    return draw


def per_call(call: Callable[[], object], block: int, blocks: int) -> tuple[float, float]:
    """Medians over ``blocks`` of the mean seconds per call in ``block`` calls:
    wall-clock time, and this thread's CPU time (which a shared, loaded machine
    inflates far less: a long call is more often preempted mid-way)."""
    for _ in range(block):
        call()
    wall, cpu = [], []
    for _ in range(blocks):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(block):
            call()
        cpu.append((time.thread_time() - c0) / block)
        wall.append((time.perf_counter() - t0) / block)
    return statistics.median(wall), statistics.median(cpu)


def main(argv: list[str]) -> int:
    from loaderx import MixtureSampler, Sampler

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=25)
    args = ap.parse_args(argv)

    cases = [(mode, r, b) for mode in ("IID", "CYCLIC") for r in RANGE_COUNTS for b in BATCHES]
    for case in cases:
        verify(*case)
    print(f"# {machine()}")
    print(f"# load average before: {load_average()}")
    print("# outputs verified: ranges, per-batch shares, seek; NumPy shares within 5 sigma")

    results: dict[tuple[str, int, int], dict[str, list[tuple[float, float]]]] = {}
    for _ in range(args.rounds):
        for mode_name, r, b in cases:
            mode = Sampler.Mode[mode_name]
            ranges, weights = layout(r)
            block = max(4, args.block * 256 // max(b, 256))
            contenders: dict[str, Callable[[], object]] = {
                "mixture": MixtureSampler(ranges, weights, b, mode, seed=SEED).next,
                "sampler": Sampler(LENGTH, b, mode, seed=SEED).next,
            }
            if mode_name == "IID":
                contenders["numpy"] = numpy_mixture(ranges, weights, b)
            got = results.setdefault((mode_name, r, b), {})
            for name, call in contenders.items():
                got.setdefault(name, []).append(per_call(call, block, args.blocks))
    print(f"# load average after: {load_average()}")
    print()
    print(
        f"Median µs of CPU time per next(), {LENGTH:,} positions in R ranges, "
        f"{args.rounds} rounds; last column: the wall-clock ratio"
    )
    print()
    print(
        "| mode | R | B | MixtureSampler | Sampler | mixture / Sampler | NumPy mixture "
        "| NumPy / mixture | mixture / Sampler, wall |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")

    def us(name: str, got: dict[str, list[tuple[float, float]]], column: int) -> float:
        return statistics.median(t[column] for t in got[name]) * 1e6

    for (mode_name, r, b), got in results.items():
        mix, plain = us("mixture", got, 1), us("sampler", got, 1)
        wall = us("mixture", got, 0) / us("sampler", got, 0)
        if "numpy" in got:
            numpy_us = us("numpy", got, 1)
            middle = f"{numpy_us:.2f} | {numpy_us / mix:.1f}x"
        else:
            middle = "- | -"
        print(
            f"| {mode_name} | {r} | {b} | {mix:.2f} | {plain:.2f} | {mix / plain:.2f}x "
            f"| {middle} | {wall:.2f}x |"
        )
    return 0
