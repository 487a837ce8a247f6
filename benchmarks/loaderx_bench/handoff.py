"""The Loader against the bare gather it wraps, and what its statistics cost.

For each workload (Dense tokens, Ragged tokens: batch 256; Dense images: batch
32), raw stores written from the real records under ``data/`` (synthetic records
of the same geometry when they are missing; the output says which), in one
process:

* ``bare``: ``reader.gather(sampler.next())`` in a loop, the ceiling;
* ``Loader(workers=W)`` for W in 0, 1, 2, ``prefetch=4``, no transform, the
  consumer doing nothing but ``next()``.

The first batch of every Loader is checked against the bare gather of the same
positions before anything is timed. Each figure is the median of ``--rounds`` (3)
rounds of ``--seconds`` (1.5 s) after 20 warm-up steps, the configurations
alternating within a round. Printed: batches/s, the ratio to bare, the Loader's
gather p50 from ``loader.stats()``; then what collecting the statistics costs per
step (the recording calls one step makes, replayed 200,000 times) as a share of
each Loader's measured step time.

Usage: PYTHONPATH=benchmarks python scripts/bench_handoff.py [--seconds S] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import load_average, machine, one_bench_at_a_time
from loaderx_bench.paths import DATA
from loaderx_bench.report import table

WORKERS = (0, 1, 2)
REPLAYS = 200_000


def _tokens() -> tuple[np.ndarray, np.ndarray, str]:
    t, o = DATA / "tokens" / "tokens.npy", DATA / "tokens" / "offsets.npy"
    if t.is_file() and o.is_file():
        return np.load(t, mmap_mode="r"), np.load(o), "real (scripts/prepare_tokens.py)"
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(130), 0.7, 200_000), 16, 512).astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return (rng.integers(0, 50257, offsets[-1]).astype(np.int32), offsets, "synthetic")


def build(work: Path) -> list[tuple[str, object, int, str]]:
    from loaderx.zrecord import Dense, Ragged, RaggedBatch

    out = []
    toks, offs, what = _tokens()
    dense_tokens = DATA / "tokens" / "dense_tokens.npy"
    if dense_tokens.is_file():
        dt, dwhat = np.load(dense_tokens, mmap_mode="r"), "real (scripts/prepare_tokens.py)"
    else:
        dt, dwhat = np.ascontiguousarray(toks[: 200_000 * 512]).reshape(-1, 512), what
    with Dense.create(work / "dense-tokens", dt.dtype, dt.shape[1:], codec="raw") as w:
        w.append(np.ascontiguousarray(dt))
    out.append(("Dense tokens", Dense.open(work / "dense-tokens"), 256, dwhat))
    lengths = np.diff(offs).astype(np.uint64).reshape(-1, 1)
    cu = (offs - offs[0]).astype(np.int32)
    with Ragged.create(work / "ragged-tokens", toks.dtype, ndim=1, codec="raw") as w:
        w.append(RaggedBatch(np.ascontiguousarray(toks[offs[0] : offs[-1]]), cu, lengths))
    out.append(("Ragged tokens", Ragged.open(work / "ragged-tokens"), 256, what))
    images = DATA / "vision" / "dense_images.npy"
    if images.is_file():
        im, iwhat = np.load(images, mmap_mode="r"), "real (scripts/prepare_vision.py)"
    else:
        im = np.random.default_rng(1).integers(0, 256, (2500, 3, 224, 224), dtype=np.uint8)
        iwhat = "synthetic"
    with Dense.create(work / "dense-images", im.dtype, im.shape[1:], codec="raw") as w:
        w.append(np.ascontiguousarray(im))
    out.append(("Dense images", Dense.open(work / "dense-images"), 32, iwhat))
    return out


def _arrays(batch) -> list:
    """A batch's arrays: a DLTensor itself, a RaggedBatch's three."""
    if hasattr(batch, "values"):
        return [batch.values, batch.cu_seqlens, batch.shapes]
    return [batch]


def _same(a: object, b: object) -> bool:
    pairs = zip(_arrays(a), _arrays(b), strict=True)
    return all(np.array_equal(np.from_dlpack(x), np.from_dlpack(y)) for x, y in pairs)


def check(reader, batch: int) -> None:
    from loaderx.dataloader import Loader
    from loaderx.sampler import Sampler

    for w in WORKERS:
        s = Sampler(len(reader), batch, Sampler.Mode.IID, seed=7)
        with Loader({"x": [reader]}, s, workers=w) as loader:
            got = loader.next()[0]["x"]
        want = reader.gather(Sampler(len(reader), batch, Sampler.Mode.IID, seed=7).next())
        if not _same(got, want):
            raise SystemExit(f"Loader(workers={w}) delivered other records than the gather")


def bare(reader, batch: int, seconds: float) -> float:
    from loaderx.sampler import Sampler

    s = Sampler(len(reader), batch, Sampler.Mode.IID, seed=1)
    for _ in range(20):
        reader.gather(s.next())
    k, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        reader.gather(s.next())
        k += 1
    return k / (time.perf_counter() - t0)


def loader_rate(reader, batch: int, workers: int, seconds: float) -> tuple[float, float]:
    from loaderx.dataloader import Loader
    from loaderx.sampler import Sampler

    s = Sampler(len(reader), batch, Sampler.Mode.IID, seed=1)
    with Loader({"x": [reader]}, s, workers=workers, prefetch=4) as loader:
        for _ in range(20):
            loader.next()
        loader.reset_stats()
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            loader.next()
            k += 1
        rate = k / (time.perf_counter() - t0)
        return rate, loader.stats()["stages"]["gather"]["p50_s"]


def stats_cost(batch_value: object) -> float:
    """Seconds per step of what the statistics add to a step: the six clock
    reads of a step that waits for a remote read and has no transform (entering
    next(), around the draw, the gather and the wait, at delivery), counting the
    batch's bytes and recording it; a local step reads the clock four times."""
    from loaderx.dataloader._stats import Recorder, batch_bytes

    rec = Recorder(8, ("draw", "gather"))
    clock = time.perf_counter_ns
    rec.called(clock())
    shards = [{"x": batch_value}]
    t0 = time.perf_counter()
    for _ in range(REPLAYS):
        called, a, b, c, d = clock(), clock(), clock(), clock(), clock()
        n = batch_bytes(shards)
        now = clock()
        rec.delivered((b - a, c - b, d - c, -1, now - called, n, 2), now)
    rec.stats()
    return (time.perf_counter() - t0) / REPLAYS


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"Machine: {machine()}")
    print(f"Load average at start: {load_average()}")
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(prefix="loaderx-handoff-") as d:
        workloads = build(Path(d))
        rows, cost_rows = [], []
        for label, reader, batch, what in workloads:
            print(f"{label}: {len(reader):,} records, batch {batch}; data: {what}")
            check(reader, batch)
            runs: dict[str, list[float]] = {"bare": []}
            p50: dict[int, list[float]] = {w: [] for w in WORKERS}
            for _ in range(args.rounds):
                runs["bare"].append(bare(reader, batch, args.seconds))
                for w in WORKERS:
                    rate, g = loader_rate(reader, batch, w, args.seconds)
                    runs.setdefault(f"w{w}", []).append(rate)
                    p50[w].append(g)
            base = statistics.median(runs["bare"])
            row = [label, f"{base:,.0f}"]
            for w in WORKERS:
                m = statistics.median(runs[f"w{w}"])
                g = statistics.median(p50[w]) * 1e6
                row.append(f"{m:,.0f} ({m / base:.2f}x, gather {g:,.0f} µs)")
            rows.append(row)
            cost = stats_cost(reader.gather(np.arange(batch, dtype=np.uint64)))
            shares = [cost * statistics.median(runs[f"w{w}"]) for w in WORKERS]
            cost_rows.append([label, f"{cost * 1e6:.2f}"] + [f"{s:.2%}" for s in shares])
            reader.close()
    heads = ["workload", "bare gather/s"] + [f"Loader workers={w}, batches/s" for w in WORKERS]
    print()
    print(table(heads, rows))
    print()
    heads = ["workload", "statistics µs/step"] + [f"share of a workers={w} step" for w in WORKERS]
    print(table(heads, cost_rows))
    print(f"\nLoad average at end: {load_average()}")
    return 0
