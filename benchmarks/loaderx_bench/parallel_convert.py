"""Parallel conversion: one token corpus converted into one Ragged store by 1 and
2 worker processes writing part stores that ``loaderx.zrecord.concat`` then
publishes, against one writer in one process.

The corpus: ``data/tokens/`` from ``scripts/prepare_tokens.py`` (real GPT-2 tokens)
when it exists, else the synthetic Zipf tokens of ``loaderx_bench.loader`` (100,000
records; ``--quick``: 20,000), as ``tokens.npy`` + ``offsets.npy``, memory-mapped.
Each conversion task appends its run of records to a new Ragged int32 store in
one call and closes it (which fsyncs it).

Configurations, for codecs raw and zstd:

- **one writer**: one process converts every record into one store with the
  default ``data_shards=4``, which the writer fills from its own threads. The
  baseline of the ratios.
- **P processes, 4 parts**: a ``ProcessPoolExecutor`` of P processes (started,
  with loaderx imported, before the clock starts) converts 4 runs of records into
  4 part stores of ``data_shards=1``; then ``concat`` publishes one store from
  them (hard links; timed separately, and included in the total).

Before any timing, every configuration's output is checked once: the store
verifies, and its values and ``cu_seqlens`` equal the corpus's. Then the
configurations run in ``--rounds`` interleaved rounds (default 3; ``--quick``: 1)
and the tables show each one's median round. ``os.sync()`` runs before each
measurement. Outputs go under ``--dir`` (default: a new folder under /tmp) and
are removed at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from loaderx_bench.loader import ragged_source
from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time
from loaderx_bench.report import table
from loaderx_bench.units import MIB

CODECS = ("raw", "zstd")
PARTS = 4


def convert_range(
    tokens: str, offsets: str, start: int, stop: int, dest: str, codec: str, shards: int
) -> None:
    """Appends records `start..stop` of the corpus to a new Ragged store at `dest`."""
    from loaderx.zrecord import Ragged, RaggedBatch

    toks = np.load(tokens, mmap_mode="r")
    offs = np.load(offsets)[start : stop + 1]
    batch = RaggedBatch(
        toks[offs[0] : offs[-1]],
        (offs - offs[0]).astype(np.int32),
        np.diff(offs).astype(np.uint64).reshape(-1, 1),
    )
    with Ragged.create(dest, toks.dtype, ndim=1, codec=codec, data_shards=shards) as w:
        w.append(batch)


def _ready() -> int:
    import loaderx.zrecord  # noqa: F401 - imported before the clock starts

    return os.getpid()


def run_config(pool, workers: int, src: tuple[str, str], n: int, out: Path, codec: str) -> dict:
    """Converts the corpus into the store `out` as configuration `workers` (0: one
    writer, no parts) says, and returns the seconds of each step."""
    from loaderx.zrecord import concat

    os.sync()
    start = time.perf_counter()
    if workers == 0:
        pool.submit(convert_range, *src, 0, n, str(out), codec, 4).result()
        return {"parts": time.perf_counter() - start, "concat": 0.0}
    cuts = [n * k // PARTS for k in range(PARTS + 1)]
    dests = [f"{out}.part-{k}" for k in range(PARTS)]
    jobs = [
        pool.submit(convert_range, *src, cuts[k], cuts[k + 1], dests[k], codec, 1)
        for k in range(PARTS)
    ]
    for j in jobs:
        j.result()
    parted = time.perf_counter()
    concat(dests, out)
    return {"parts": parted - start, "concat": time.perf_counter() - parted}


def check(out: Path, src: tuple[str, str]) -> None:
    """Raises AssertionError unless the store at `out` verifies and holds exactly
    the corpus's records."""
    from loaderx.zrecord import Ragged

    toks, offs = np.load(src[0], mmap_mode="r"), np.load(src[1])
    with Ragged.open(out) as r:
        r.verify()
        batch = r[:]
        assert np.array_equal(np.from_dlpack(batch.values), toks[offs[0] : offs[-1]])
        assert np.array_equal(np.from_dlpack(batch.cu_seqlens), offs - offs[0])
        assert np.array_equal(np.from_dlpack(batch.shapes)[:, 0], np.diff(offs))


def remove(out: Path) -> None:
    """Removes the store `out` and its parts."""
    for p in out.parent.glob(f"{out.name}*"):
        shutil.rmtree(p)


def measure(src: tuple[str, str], n: int, root: Path, rounds: int) -> dict[tuple, dict]:
    """Median round (by total time) of every (codec, workers) configuration."""
    ctx = multiprocessing.get_context("spawn")
    pools = {w: ProcessPoolExecutor(max(w, 1), mp_context=ctx) for w in (0, 1, 2)}
    try:
        for w, pool in pools.items():
            # Start every process and import loaderx in it before any timing.
            pids = {f.result() for f in [pool.submit(_ready) for _ in range(4 * max(w, 1))]}
            assert len(pids) <= max(w, 1)
        configs = [(codec, w) for codec in CODECS for w in pools]
        out = root / "store"
        for codec, w in configs:
            run_config(pools[w], w, src, n, out, codec)
            check(out, src)
            remove(out)
        times: dict[tuple, list[dict]] = {c: [] for c in configs}
        for _ in range(rounds):
            for codec, w in configs:
                times[(codec, w)].append(run_config(pools[w], w, src, n, out, codec))
                remove(out)
    finally:
        for pool in pools.values():
            pool.shutdown()
    by_total = {c: sorted(v, key=lambda t: t["parts"] + t["concat"]) for c, v in times.items()}
    return {c: v[len(v) // 2] for c, v in by_total.items()}


def print_table(results: dict[tuple, dict], n: int, nbytes: int) -> None:
    rows = []
    for codec in CODECS:
        base = results[(codec, 0)]["parts"]
        for (c, w), t in results.items():
            if c != codec:
                continue
            total = t["parts"] + t["concat"]
            procs = "1 process" if w == 1 else f"{w} processes"
            label = "one writer, data_shards=4" if w == 0 else f"{procs}, {PARTS} parts"
            rows.append(
                [
                    codec,
                    label,
                    f"{t['parts']:.2f}",
                    "-" if w == 0 else f"{t['concat'] * 1000:.1f}",
                    f"{total:.2f}",
                    f"{n / total / 1000:.0f}",
                    f"{nbytes / MIB / total:.0f}",
                    f"{base / total:.2f}x",
                ]
            )
    headers = [
        "codec",
        "configuration",
        "write s",
        "concat ms",
        "total s",
        "k records/s",
        "MiB/s",
        "vs one writer",
    ]
    print(table(headers, rows))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 synthetic records, one round")
    ap.add_argument("--dir", help="where the stores go (default: a new /tmp folder)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    with one_bench_at_a_time():
        root = Path(tempfile.mkdtemp(prefix="loaderx-bench-parallel-convert-", dir=args.dir))
        try:
            print(f"Machine: {machine()}")
            print(f"loaderx checkout: {checkout()}")
            print(f"Load average at start: {load_average()}")
            tokens, offsets, what = ragged_source(args.quick, root)
            offs = np.load(offsets)
            n = len(offs) - 1
            nbytes = int(offs[-1] - offs[0]) * np.load(tokens, mmap_mode="r").itemsize
            print(
                f"Corpus: {what}, {nbytes / MIB:.1f} MiB of tokens; "
                f"output checked against it first; median of {rounds} interleaved rounds\n"
            )
            results = measure((str(tokens), str(offsets)), n, root, rounds)
            print_table(results, n, nbytes)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"\nLoad average at end: {load_average()}")


if __name__ == "__main__":
    main()
