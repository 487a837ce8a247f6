"""What checked reads cost, and what zstd's own frame checksums would cost.

1. Checked reads. The same store is opened twice, ``Dense.open(path)`` and
   ``Dense.open(path, checked=True)`` (every gathered record's stored bytes hashed
   and compared with its index entry), and random batches of 256 are gathered from
   both in interleaved rounds (the median round is reported). Workloads: tokens
   (``int32[512]``, 2 KiB records, 100,000 of them) and images
   (``uint8[3, 224, 224]``, 147 KiB, 2,000), each raw and zstd. Both readers'
   batches are checked to be equal before timing.

2. zstd frame checksums. zstd can end each frame with a checksum of its content
   (4 bytes) that its decoder verifies. The same records are compressed with the
   ``zstandard`` package at level 3 with and without it, and every frame is
   decompressed, timed over the whole set: the table gives the extra stored bytes
   and the decode time ratio. Checked reads already cover every stored byte of a
   record, so loaderx does not write frame checksums; this measures what they
   would add.

Synthetic data: tokens are Zipf-distributed ids (text-like redundancy), images are
smooth gradients plus noise. Stores go under ``--dir`` (default: a new folder under
/tmp) and are removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time
from loaderx_bench.report import table

BATCH = 256
ROUNDS = 5
SECONDS_PER_ROUND = 1.0


def tokens(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.minimum(rng.zipf(1.3, size=(n, 512)), 50_000).astype(np.int32)


def images(n: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:224, 0:224]
    base = ((x + y) // 2).astype(np.int16)
    out = np.empty((n, 3, 224, 224), dtype=np.uint8)
    for i in range(n):
        noise = rng.integers(-12, 13, size=(3, 224, 224), dtype=np.int16)
        out[i] = np.clip(base + (i % 97) + noise, 0, 255).astype(np.uint8)
    return out


def gather_rate(reader, n: int, rng: np.random.Generator) -> float:
    """Records per second over random batches for about SECONDS_PER_ROUND."""
    done, spent = 0, 0.0
    while spent < SECONDS_PER_ROUND:
        idx = rng.integers(0, n, size=BATCH)
        t = time.perf_counter()
        batch = reader[idx]
        spent += time.perf_counter() - t
        del batch
        done += BATCH
    return done / spent


def checked_reads(root: Path, quick: bool) -> list[list[str]]:
    from loaderx.zrecord import Dense

    rows = []
    workloads = {
        "tokens": tokens(20_000 if quick else 100_000),
        "images": images(300 if quick else 2_000),
    }
    for name, data in workloads.items():
        for codec in ("raw", "zstd"):
            path = root / f"{name}-{codec}"
            with Dense.create(path, data.dtype, data.shape[1:], codec=codec) as w:
                w.append(data)
            plain, checked = Dense.open(path), Dense.open(path, checked=True)
            probe = np.random.default_rng(9).integers(0, len(data), size=BATCH)
            expect = data[probe]
            for r in (plain, checked):
                if not np.array_equal(np.from_dlpack(r[probe]), expect):
                    raise SystemExit(f"{path}: a gather returned wrong data")
            rates = {"plain": [], "checked": []}
            rng = np.random.default_rng(3)
            gather_rate(plain, len(data), rng)
            gather_rate(checked, len(data), rng)
            for _ in range(1 if quick else ROUNDS):
                rates["plain"].append(gather_rate(plain, len(data), rng))
                rates["checked"].append(gather_rate(checked, len(data), rng))
            p, c = (statistics.median(rates[k]) for k in ("plain", "checked"))
            mib = data[0].nbytes / 2**20
            rows.append(
                [
                    f"{name} {codec}",
                    f"{p / 1e3:,.0f}",
                    f"{c / 1e3:,.0f}",
                    f"{p * mib:,.0f}",
                    f"{c * mib:,.0f}",
                    f"{c / p:.2f}",
                ]
            )
            plain.close()
            checked.close()
    return rows


def frame_checksums(quick: bool) -> list[list[str]]:
    import zstandard

    rows = []
    for name, data in (
        ("tokens", tokens(5_000 if quick else 20_000)),
        ("images", images(100 if quick else 400)),
    ):
        records = [r.tobytes() for r in data]
        timings = {}
        sizes = {}
        for flag in (False, True):
            c = zstandard.ZstdCompressor(level=3, write_checksum=flag)
            frames = [c.compress(r) for r in records]
            sizes[flag] = sum(map(len, frames))
            d = zstandard.ZstdDecompressor()
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                for f in frames:
                    d.decompress(f)
                best = min(best, time.perf_counter() - t)
            timings[flag] = best
        rows.append(
            [
                name,
                f"{sizes[False] / len(records):,.0f}",
                f"{(sizes[True] - sizes[False]) / sizes[False] * 100:.2f}%",
                f"{timings[True] / timings[False]:.2f}",
            ]
        )
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", help="where to build the stores (default: a temporary folder)")
    p.add_argument("--quick", action="store_true", help="smaller stores, one round")
    args = p.parse_args(argv)
    with one_bench_at_a_time():
        print(f"Machine: {machine()}")
        print(f"Checkout: {checkout()}")
        print(f"Load average at start: {load_average()}")
        root = Path(args.dir or tempfile.mkdtemp(prefix="loaderx-checked-"))
        root.mkdir(parents=True, exist_ok=True)
        try:
            rows = checked_reads(root, args.quick)
        finally:
            if not args.dir:
                shutil.rmtree(root, ignore_errors=True)
        print("\nChecked reads: random batches of 256, median of rounds\n")
        print(
            table(
                [
                    "workload",
                    "k records/s",
                    "checked k records/s",
                    "MiB/s",
                    "checked MiB/s",
                    "checked / plain",
                ],
                rows,
            )
        )
        print("\nzstd frame checksums (level 3): stored bytes and decode time\n")
        print(
            table(
                ["workload", "bytes per frame", "checksum adds", "decode time ratio"],
                frame_checksums(args.quick),
            )
        )
        print(f"\nLoad average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
