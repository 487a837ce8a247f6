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
gather p50 from ``loader.stats()``; then what collecting the statistics costs:
the statements that exist only for them, replayed 200,000 times for a step that
is not sampled and for one that is, the sampling rate the loader picks at the
measured workers=1 step time, and the resulting share of that step.

With ``--builds REV...`` the same Loader rates are measured for each git revision
side by side (before and after a change to the hand-off): every revision is built
once into its own venv by ``loaderx_bench.builds.build`` (``--cache``, default
``data/builds/``), the stores are written once by this process, and every build
opens them in a process of its own per round, builds alternating, checking its
first batch of each configuration against its bare gather before timing. Printed:
one table per build, as above, without the statistics' cost.

Usage: PYTHONPATH=benchmarks python scripts/bench_handoff.py [--seconds S] [--rounds R]
       PYTHONPATH=benchmarks python scripts/bench_handoff.py --builds 7a5fa20 HEAD
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import load_average, machine, one_bench_at_a_time
from loaderx_bench.paths import DATA
from loaderx_bench.report import table
from loaderx_bench.workers import emit, run_backend

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


def make_stores(work: Path) -> list[tuple[str, object, int, str]]:
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


def stats_cost(reader, batch: int, step_s: float) -> tuple[float, float, int, float]:
    """What the statistics add to a step of `step_s` seconds on the path with
    no worker thread (the Loader with workers >= 1 and no transform): the
    statements of ``Pipeline.next``, ``step_ahead`` and ``draw_and_begin`` that
    exist only for them, replayed in the same order, for a step not sampled and
    for a sampled one (its three more clock reads, the ready count over a full
    queue of real begun gathers of `reader`, the lock, the record and its share
    of the folding), less the replay's own loop; every step reads the clock
    twice for the consumer's wait. Returns (unsampled s, sampled s
    more, the sampling threshold the recorder picks at that step time, the
    resulting share of the step)."""
    import threading
    from collections import deque

    from loaderx.dataloader._begun import Begun, Later
    from loaderx.dataloader._stats import EVERY_STEP, SAMPLE, SAMPLE_MASK, Recorder, _threshold

    clock = time.perf_counter_ns
    rec = Recorder(6, ("draw", "gather"))
    rec.called(clock(), 0)
    lock = threading.Lock()
    pos = np.arange(batch, dtype=np.uint64)
    begun = deque(Begun(k, [{"x": Later(reader._begin(pos, None))}]) for k in range(5))
    while not begun[-1].ready():
        time.sleep(0.001)
    item = begun[0]

    def replay(threshold: int) -> float:
        t0 = time.perf_counter()
        for step in range(REPLAYS):
            rec.threshold, rec.weight = threshold, 1
            called = clock()  # next(): every step's wait is counted
            weight = rec.weight if SAMPLE[step & SAMPLE_MASK] < rec.threshold else 0
            ready = 0
            if weight and begun:  # step_ahead, the queue full
                if begun[-1].ready():
                    ready = len(begun)
            if weight:  # draw_and_begin
                a = clock()
                b = clock()
                item.end_ns = clock()
                item.draw_ns, item.gather_ns, item.weight = b - a, item.end_ns - b, weight
            else:
                item.weight = 0
            now = clock()  # next()
            rec.waited += now - called
            if weight or item.weight:
                gather = -1
                if item.weight:
                    gather = 0
                    for v in item.later:
                        gather += v.work_ns
                times = (item.draw_ns, gather, -1, -1)
                with lock:  # record()
                    if not weight:
                        rec.delivered((*times, item.weight, -1, 0, 0), step, None)
                    else:
                        rec.delivered((*times, item.weight, now - called, ready, weight), step, now)
                        if rec.report_every is not None:
                            pass
        rec.stats(REPLAYS)
        return (time.perf_counter() - t0) / REPLAYS

    def loop() -> float:
        t0 = time.perf_counter()
        for _ in range(REPLAYS):
            rec.threshold, rec.weight = 0, 1
        return (time.perf_counter() - t0) / REPLAYS

    base = min(loop() for _ in range(3))
    unsampled = min(replay(0) for _ in range(3)) - base
    sampled = min(replay(EVERY_STEP) for _ in range(3)) - base - unsampled
    t = _threshold(step_s * 1e9)
    share = (unsampled + sampled * t / EVERY_STEP) / step_s
    return unsampled, sampled, t, share


def rates(reader, batch: int, seconds: float) -> dict[str, tuple[float, float]]:
    """One round of one workload: the bare gather's rate, then each Loader's rate
    and gather p50."""
    out = {"bare": (bare(reader, batch, seconds), 0.0)}
    for w in WORKERS:
        out[f"w{w}"] = loader_rate(reader, batch, w, seconds)
    return out


def row(label: str, runs: list[dict[str, tuple[float, float]]]) -> list[str]:
    """A table row of the rounds' medians: bare, then each Loader against it."""
    base = statistics.median(r["bare"][0] for r in runs)
    cells = [label, f"{base:,.0f}"]
    for w in WORKERS:
        m = statistics.median(r[f"w{w}"][0] for r in runs)
        g = statistics.median(r[f"w{w}"][1] for r in runs) * 1e6
        cells.append(f"{m:,.0f} ({m / base:.2f}x, gather {g:,.0f} µs)")
    return cells


HEADS = ["workload", "bare gather/s"] + [f"Loader workers={w}, batches/s" for w in WORKERS]


def worker(kind: str, path: str, batch: int, seconds: float) -> None:
    """In a build's venv: one round of the store at `path`, checked first."""
    import loaderx
    from loaderx.zrecord import Dense, Ragged

    reader = (Dense if kind == "dense" else Ragged).open(path)
    check(reader, batch)
    got = rates(reader, batch, seconds)
    emit({"status": "ok", "rates": got, "loaderx": str(Path(loaderx.__file__).resolve())})
    reader.close()


def compare_builds(revs: list[str], cache: Path, args: argparse.Namespace) -> int:
    from loaderx.zrecord import Dense
    from loaderx_bench.builds import build

    builds = []
    for rev in revs:
        short, python = build(rev, cache.resolve(), False)
        builds.append((f"{short} ({rev})", python))
    print(f"Machine: {machine()}")
    print(f"Builds: {', '.join(name for name, _ in builds)}")
    print(f"Load average at start: {load_average()}")
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(prefix="loaderx-handoff-") as d:
        workloads = []
        for label, reader, batch, what in make_stores(Path(d)):
            kind = "dense" if isinstance(reader, Dense) else "ragged"
            workloads.append((label, kind, str(reader.path), batch))
            print(f"{label}: {len(reader):,} records, batch {batch}; data: {what}")
            reader.close()
        runs = {(name, label): [] for name, _ in builds for label, *_ in workloads}
        for k in range(args.rounds):
            for label, kind, path, batch in workloads:
                for name, python in builds:
                    argv = ["-m", __spec__.name, "--seconds", str(args.seconds)]
                    argv += ["--worker", kind, path, str(batch)]
                    got = run_backend(python, argv, None, 600.0)
                    if got.get("status") != "ok":
                        raise RuntimeError(f"{name}, {label}: {got.get('reason')}")
                    venv = python.parent.parent.resolve()
                    if not Path(got["loaderx"]).is_relative_to(venv):
                        # A PYTHONPATH naming a checkout's python/ would win over
                        # the build's own install, and every build would be it.
                        raise RuntimeError(
                            f"{name} imported loaderx from {got['loaderx']}, not from its "
                            f"venv {venv}; run without loaderx on PYTHONPATH"
                        )
                    runs[(name, label)].append({n: tuple(v) for n, v in got["rates"].items()})
                    print(f"  round {k + 1} {label} {name}: done", flush=True)
    for name, _ in builds:
        print(f"\n{name}:\n")
        print(table(HEADS, [row(label, runs[(name, label)]) for label, *_ in workloads]))
    print(f"\nLoad average at end: {load_average()}")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--builds", nargs="+", metavar="REV", help="git revisions side by side")
    ap.add_argument("--cache", type=Path, default=DATA / "builds", help="the builds' folder")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        kind, path, batch = args.worker
        worker(kind, path, int(batch), args.seconds)
        return 0
    if args.builds:
        return compare_builds(args.builds, args.cache, args)
    print(f"Machine: {machine()}")
    print(f"Load average at start: {load_average()}")
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(prefix="loaderx-handoff-") as d:
        rows, cost_rows = [], []
        for label, reader, batch, what in make_stores(Path(d)):
            print(f"{label}: {len(reader):,} records, batch {batch}; data: {what}")
            check(reader, batch)
            runs = [rates(reader, batch, args.seconds) for _ in range(args.rounds)]
            rows.append(row(label, runs))
            rate = statistics.median(r["w1"][0] for r in runs)
            unsampled, sampled, t, share = stats_cost(reader, batch, 1 / rate)
            cost_rows.append(
                [label, f"{1e6 / rate:.1f}", f"{unsampled * 1e9:.0f}", f"{sampled * 1e9:,.0f}"]
                + [f"1 in {256 // t}", f"{share:.2%}"]
            )
            reader.close()
    print()
    print(table(HEADS, rows))
    print()
    heads = [
        "workload",
        "workers=1 step µs",
        "statistics ns, step not sampled",
        "ns more, sampled step",
        "steps sampled",
        "share of the step",
    ]
    print(table(heads, cost_rows))
    print(f"\nLoad average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
