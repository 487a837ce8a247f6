"""Open time against record count: Dense and Ragged stores of 10k, 1M and 10M records.

What is measured, per store, each in a fresh worker process on a warm page cache:

1. ``open``: ``Dense.open`` / ``Ragged.open`` until the reader is usable.
2. ``first gather``: one random batch of 256 right after open. For a large index
   this includes checking the index blocks the batch touches against their
   checksums, the part of validation that open defers.
3. ``verify``: the full check, for scale (every record hashed and decoded).

For comparison, the same stores are opened as format version 1 (the header
rewritten without the version 2 fields, ``index.sum`` left out, data files
hard-linked): a version 1 reader has no block checksums, so it hashes the whole
index at open, which is what every open cost before version 2.

Records are tiny (Dense ``uint8[4]``; Ragged ``uint8`` of 1 to 8 elements) so that
the index dominates the store, the case where open time matters. Stores go under
``--dir`` (default: a new folder under /tmp) and are removed at the end. Before
timing, each store is verified once, which also checks that it reads back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time
from loaderx_bench.report import table
from loaderx_bench.workers import emit, run_worker

COUNTS = (10_000, 1_000_000, 10_000_000)
OPENS = 7  # opens per store; the median is reported
BATCH = 256


def build(kind: str, n: int, path: Path) -> None:
    from loaderx.zrecord import Dense, Ragged, RaggedBatch

    rng = np.random.default_rng(n)
    if kind == "dense":
        data = rng.integers(0, 255, size=(n, 4), dtype=np.uint8)
        with Dense.create(path, np.uint8, (4,), codec="raw") as w:
            w.append(data)
        return
    lens = rng.integers(1, 9, size=n)
    cu = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=cu[1:])
    values = rng.integers(0, 255, size=int(cu[-1]), dtype=np.uint8)
    with Ragged.create(path, np.uint8, ndim=1, codec="raw") as w:
        w.append(RaggedBatch(values, cu, lens.astype(np.uint64).reshape(n, 1)))


def as_version_1(src: Path, dst: Path) -> None:
    """A version 1 copy of `src`: the same index and data (hard-linked) under a
    header without the version 2 fields."""
    import xxhash

    from loaderx import _native

    dst.mkdir()
    kept = {_native.INDEX_FILE} | {_native.data_file_name(i) for i in range(256)}
    for f in src.iterdir():
        if f.name in kept:
            os.link(f, dst / f.name)
    head = (src / _native.HEADER_FILE).read_bytes()[:-8]
    body = bytearray(head[:64] + head[88:])
    struct.pack_into("<I", body, 8, 1)
    body = bytes(body)
    check = struct.pack("<Q", xxhash.xxh3_64_intdigest(body))
    (dst / _native.HEADER_FILE).write_bytes(body + check)


def worker(kind: str, path: str) -> None:
    """Times opens, a first gather and verify of one store; prints JSON."""
    from loaderx.zrecord import Dense, Ragged

    cls = Dense if kind == "dense" else Ragged
    opens = []
    for _ in range(OPENS):
        t = time.perf_counter()
        r = cls.open(path)
        opens.append(time.perf_counter() - t)
        r.close()
    rng = np.random.default_rng(0)
    r = cls.open(path)
    idx = rng.integers(0, len(r), size=BATCH)
    t = time.perf_counter()
    r[idx]
    first = time.perf_counter() - t
    t = time.perf_counter()
    r.verify()
    verify = time.perf_counter() - t
    emit(
        {
            "open_ms": statistics.median(opens) * 1e3,
            "first_gather_ms": first * 1e3,
            "verify_ms": verify * 1e3,
            "records": len(r),
            "version": r.format_version,
        }
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", help="where to build the stores (default: a temporary folder)")
    p.add_argument("--quick", action="store_true", help="10k and 1M records only")
    p.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    with one_bench_at_a_time():
        return run(args)


def run(args: argparse.Namespace) -> int:
    from loaderx import _native

    print(f"Machine: {machine()}")
    print(f"Checkout: {checkout()}")
    print(f"Load average at start: {load_average()}")
    root = Path(args.dir or tempfile.mkdtemp(prefix="loaderx-open-"))
    root.mkdir(parents=True, exist_ok=True)
    counts = COUNTS[:2] if args.quick else COUNTS
    rows = []
    try:
        for kind in ("dense", "ragged"):
            for n in counts:
                store = root / f"{kind}-{n}"
                t = time.perf_counter()
                build(kind, n, store)
                built = time.perf_counter() - t
                old = root / f"{kind}-{n}-v1"
                as_version_1(store, old)
                index_mib = (store / _native.INDEX_FILE).stat().st_size / 2**20
                for path, label in ((store, "2"), (old, "1")):
                    r = run_worker(sys.executable, ["-m", __name__, "--worker", kind, str(path)])
                    if r["version"] != int(label):
                        raise SystemExit(f"{path}: opened as version {r['version']}")
                    rows.append(
                        [
                            kind,
                            f"{n:,}",
                            label,
                            f"{index_mib:,.1f}",
                            f"{r['open_ms']:.3f}",
                            f"{r['first_gather_ms']:.3f}",
                            f"{r['verify_ms']:,.0f}",
                        ]
                    )
                print(f"built {kind} {n:,} records in {built:.1f} s", file=sys.stderr)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        table(
            [
                "store",
                "records",
                "format",
                "index MiB",
                "open ms",
                "first gather of 256 ms",
                "verify ms",
            ],
            rows,
        )
    )
    print(f"\nLoad average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
