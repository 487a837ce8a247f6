"""The packing benchmark's delivered paths (loaderx, Grain, padding), their checks
and timing, and the plan-cost and seek measurements at many records; run by
``loaderx_bench.packing``, which documents them."""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

SEED = 0
Rows = dict[str, np.ndarray]  # tokens, segment_ids, positions: (rows, width) each


def _loaderx(path: Path, lengths: np.ndarray, budget: int, args: argparse.Namespace):
    from loaderx.dataloader import Loader, StepInfo
    from loaderx.packing import to_dense
    from loaderx.sampler import PackingSampler, Sampler
    from loaderx.zrecord import Ragged

    def dense(shards: list[dict[str, Any]], step: StepInfo) -> tuple[Rows, np.ndarray]:
        assert step.pack_offsets is not None
        rows = to_dense(shards[0]["tokens"], step.pack_offsets[0], budget)
        return rows, step.positions

    sampler = PackingSampler(lengths, budget, args.packs, Sampler.Mode.CYCLIC, seed=SEED)
    store = Ragged.open(path)
    return Loader({"tokens": [store]}, sampler, transform=dense, workers=args.workers)


def _padded(path: Path, lengths: np.ndarray, budget: int, args: argparse.Namespace):
    from loaderx.dataloader import Loader, StepInfo
    from loaderx.packing import to_dense
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Ragged

    def pad(shards: list[dict[str, Any]], step: StepInfo) -> tuple[Rows, np.ndarray]:
        batch = shards[0]["tokens"]
        longest = int(np.diff(np.from_dlpack(batch.cu_seqlens)).max())
        rows = to_dense(batch, np.arange(len(step.positions) + 1), min(longest, budget))
        return rows, step.positions

    sampler = Sampler(len(lengths), padded_batch(lengths, budget, args.packs), Sampler.Mode.CYCLIC)
    store = Ragged.open(path)
    return Loader({"tokens": [store]}, sampler, transform=pad, workers=args.workers)


def padded_batch(lengths: np.ndarray, budget: int, packs: int) -> int:
    """Records per padded batch: as many as `packs` full packs hold on average."""
    return max(1, round(packs * budget / float(np.minimum(lengths, budget).mean())))


def _grain(source: Path, budget: int, threads: int, args: argparse.Namespace) -> Iterator[Rows]:
    import grain.python as gp

    toks = np.load(source / "tokens.npy", mmap_mode="r")
    offs = np.load(source / "offsets.npy")

    class Records:
        """Record i: its tokens, a slice of the same in-memory array."""

        def __len__(self) -> int:
            return len(offs) - 1

        def __getitem__(self, i: int) -> dict[str, np.ndarray]:
            return {"tokens": np.asarray(toks[offs[i] : offs[i + 1]])}

    # Grain reads records on `threads` threads ahead of the packing (its default
    # is 16, with 500 records buffered); 0 reads them in the consumer's thread.
    read = gp.ReadOptions(num_threads=threads, prefetch_buffer_size=500 if threads else 0)
    ds = gp.MapDataset.source(Records()).shuffle(seed=SEED).repeat(None).to_iter_dataset(read)
    packed = gp.experimental.FirstFitPackIterDataset(
        ds, length_struct={"tokens": budget}, num_packing_bins=args.grain_bins, seed=SEED
    )
    for b in packed.batch(args.packs):
        yield {
            "tokens": b["tokens"],
            "segment_ids": b["tokens_segment_ids"],
            "positions": b["tokens_positions"],
        }


def _segments(rows: Rows) -> Iterator[np.ndarray]:
    """Each segment's tokens, row by row, after checking segment ids and positions."""
    for tok, seg, pos in zip(rows["tokens"], rows["segment_ids"], rows["positions"], strict=True):
        real = seg > 0
        n = int(real.sum())
        assert real[:n].all() and not real[n:].any(), "padding inside a row"
        starts = np.flatnonzero(np.diff(seg[:n], prepend=-1) != 0)
        ends = np.append(starts[1:], n)
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            assert (pos[a:b] == np.arange(b - a)).all(), "positions that do not count from 0"
            yield tok[a:b]


def _digest(tokens: np.ndarray) -> bytes:
    return hashlib.blake2b(
        np.ascontiguousarray(tokens, np.int32).tobytes(), digest_size=16
    ).digest()


def check(
    name: str,
    steps: Iterator[Any],
    records: Callable[[int], np.ndarray],
    known: set[bytes],
    budget: int,
    count: int,
) -> None:
    """`count` steps of a path are correct: no row over budget, every segment the
    record at its position (paths that report positions) or a record of the corpus."""
    for _ in range(count):
        out = next(steps)
        rows, positions = out if isinstance(out, tuple) else (out, None)
        assert rows["tokens"].shape[1] <= budget, f"{name}: a row over budget"
        segs = list(_segments(rows))
        if positions is not None:
            assert len(segs) == len(positions), f"{name}: records lost"
            for seg, r in zip(segs, positions.tolist(), strict=True):
                assert (seg == records(r)[:budget]).all(), f"{name}: record {r} altered"
        else:
            assert all(_digest(s) in known for s in segs), f"{name}: a segment no record holds"


def timed(steps: Iterator[Any], seconds: float) -> tuple[float, float, int]:
    """(real tokens per second, fill, steps) over at least `seconds` after one warm-up step."""
    next(steps)
    tokens = slots = n = 0
    t0 = time.perf_counter()
    while True:
        out = next(steps)
        rows = out[0] if isinstance(out, tuple) else out
        seg = rows["segment_ids"]
        tokens += int(np.count_nonzero(seg))
        slots += seg.size
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return tokens / elapsed, tokens / slots, n


def delivered_table(
    path: Path,
    source: Path,
    lengths: np.ndarray,
    budgets: tuple[int, ...],
    args: argparse.Namespace,
) -> None:
    toks = np.load(source / "tokens.npy", mmap_mode="r")
    offs = np.load(source / "offsets.npy")

    def record(r: int) -> np.ndarray:
        return np.asarray(toks[offs[r] : offs[r + 1]])

    known = {_digest(record(r)) for r in range(len(offs) - 1)}
    print(
        f"delivered: {args.packs} packs per step as (packs, tokens_per_pack) tokens, "
        f"segment ids, positions; loaderx and padded Loaders with {args.workers} workers; "
        f"Grain {args.grain_bins} packing bins, read on t threads; {args.seconds:g} s timed "
        f"per path, after checking {args.check_steps} steps"
    )
    head = f"{'tokens_per_pack':>15} {'path':>11} {'rows':>15} {'fill':>7}"
    print(f"{head} {'Mtokens/s':>10} {'steps':>6}")
    for budget in budgets:
        rates: dict[str, float] = {}
        names = ["loaderx", *(f"grain t={t}" for t in args.grain_threads), "padded"]
        for name in names:
            steps = _path(name, path, source, lengths, budget, args)
            check(name, iter(steps), record, known, budget, args.check_steps)
            _close(steps)
            steps = _path(name, path, source, lengths, budget, args)
            rate, fill, n = timed(iter(steps), args.seconds)
            _close(steps)
            rates[name] = rate
            rows = (
                f"{padded_batch(lengths, budget, args.packs)} x <= {budget}"
                if name == "padded"
                else f"{args.packs} x {budget}"
            )
            print(f"{budget:>15} {name:>11} {rows:>15} {fill:>7.2%} {rate / 1e6:>10.3f} {n:>6}")
        fastest, which = max((r, k) for k, r in rates.items() if k.startswith("grain"))
        ratio = rates["loaderx"] / fastest
        print(f"{'':>15} loaderx / fastest Grain ({which}) tokens/s: {ratio:.2f}x")


def _path(
    name: str, path: Path, source: Path, lengths: np.ndarray, budget: int, args: argparse.Namespace
) -> Any:
    """A fresh iterable of one path's steps, from its first step."""
    if name.startswith("grain t="):
        return _grain(source, budget, int(name.removeprefix("grain t=")), args)
    if name == "loaderx":
        return _loaderx(path, lengths, budget, args)
    return _padded(path, lengths, budget, args)


def _close(steps: Any) -> None:
    close = getattr(steps, "close", None)
    if callable(close):
        close()


def seek_table(lengths: np.ndarray, sizes: list[int], seeks: int) -> None:
    from loaderx.sampler import PackingSampler, Sampler

    budget, packs = 2048, 8
    rng = np.random.default_rng(SEED)
    print(
        f"plan and seek: tokens_per_pack {budget}, {packs} packs per step, the real lengths "
        f"repeated; seek(step) then next() at {seeks} random steps"
    )
    print(
        f"{'records':>12} {'plan':>10} {'plan s':>8} {'ns/record':>10} "
        f"{'seek+next us p50':>17} {'p95':>8}"
    )
    for size in sizes:
        big = np.tile(lengths, -(-size // len(lengths)))[:size]
        for mode in (Sampler.Mode.CYCLIC, Sampler.Mode.SEQUENTIAL):
            t0 = time.perf_counter()
            s = PackingSampler(big, budget, packs, mode, seed=SEED)
            plan = time.perf_counter() - t0
            last = 2**64 - 2
            times = []
            for step in rng.integers(0, last, seeks, dtype=np.uint64).tolist():
                t1 = time.perf_counter_ns()
                s.seek(step)
                s.next()
                times.append(time.perf_counter_ns() - t1)
            p50 = statistics.median(times) / 1e3
            p95 = float(np.percentile(times, 95)) / 1e3
            name = "CYCLIC/IID" if mode is Sampler.Mode.CYCLIC else "SEQUENTIAL"
            print(
                f"{size:>12,} {name:>10} {plan:>8.2f} {plan / size * 1e9:>10.1f} "
                f"{p50:>17.1f} {p95:>8.1f}"
            )
            del s
        del big
