"""Dense append throughput and writer memory, from one memory-mapped .npy source.

What is measured:

1. Throughput. A ~2 GiB .npy of synthetic uint8 (3, 224, 224) images (the
   generator of ``loaderx_bench.dense``; ``--quick``: ~256 MiB) is opened with
   ``np.load(mmap_mode='r')`` and appended to a new Dense store in ONE
   ``append`` call, for codec raw and zstd, by this checkout and by the published
   loaderx 2.8.6 (its own venv, ``--peer-python``). Next to them, plain copies of
   the same file: ``shutil.copyfile`` and a read+write loop with a 4 MiB buffer.
   ``MiB/s`` is source bytes over the append (or copy) time; ``+ sync MiB/s`` also
   counts ``close()`` and an fsync of every output file, i.e. the time until the
   output is durable (this checkout's ``close()`` already fsyncs; the published
   2.8.6 leaves its files dirty). Before each measurement dirty pages are flushed (``os.sync``),
   memory the size of the output is touched and freed, and the source is read
   once, so it is in the page cache. (The first step matters on VMs that hand idle
   guest memory back to the host, where first touching it costs a host page
   fault: without it, whichever method follows an idle gap pays for that.)

2. Peak RSS. Each append runs in a fresh worker process that reads VmHWM from
   /proc/self/status after mapping the source and again after the append. The
   writer drops the pages it has consumed from read-only file mappings, so the
   increase stays bounded (about data_shards x 4 MiB chunks plus zstd scratch)
   instead of growing with the source. For scale, a worker that only reads the
   whole mapping (no writer) shows what keeping the pages mapped would cost.

Every measurement runs in its own worker process. The machine is shared, so the
methods run in three interleaved rounds and the tables show each one's median
round by time (``--quick``: one round). Sources and stores go under ``--dir``
(default: a new folder under /tmp) and are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.dense import make_source
from loaderx_bench.files import disk_bytes, sync_tree
from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time
from loaderx_bench.memory import prefault, vm_hwm_bytes
from loaderx_bench.report import table
from loaderx_bench.units import MIB
from loaderx_bench.workers import emit, peer_python, run_worker

RECORD_SHAPE = (3, 224, 224)
CODECS = ("raw", "zstd")
COPY_BUFFER = 4 * MIB


def read_write(src: str | Path, dst: str | Path | None) -> None:
    """Copies `src` to `dst` (None: /dev/null) through one reused buffer."""
    buf = bytearray(COPY_BUFFER)
    view = memoryview(buf)
    with open(src, "rb", buffering=0) as fa, open(dst or os.devnull, "wb", buffering=0) as fb:
        while n := fa.readinto(buf):
            fb.write(view[:n])


# ---- worker side: one measurement per process ----------------------------------------


def _append(src_path: str, store: str, codec: str) -> tuple[float, float]:
    """Seconds of the single append, and of close() plus an fsync of every file of
    the store (a no-op where close() already made the store durable)."""
    from loaderx.zrecord import Dense  # this checkout's or the peer's, per interpreter

    src = np.load(src_path, mmap_mode="r")
    writer = Dense.create(store, src.dtype, src.shape[1:], codec=codec)
    start = time.perf_counter()
    writer.append(src)
    appended = time.perf_counter()
    writer.close()
    sync_tree(store)
    return appended - start, time.perf_counter() - appended


def _copy(copy, src_path: str, dst: str) -> tuple[float, float]:
    """Seconds of the copy, and of the fsync of the copied file."""
    start = time.perf_counter()
    copy(src_path, dst)
    copied = time.perf_counter()
    sync_tree(dst)
    return copied - start, time.perf_counter() - copied


def _read_through(src_path: str) -> tuple[float, float]:
    """Touches every page of the mapping, the way a naive consumer would."""
    src = np.load(src_path, mmap_mode="r")
    start = time.perf_counter()
    step = max(1, (64 * MIB) // (src.nbytes // len(src)))
    for i in range(0, len(src), step):
        src[i : i + step].max()
    return time.perf_counter() - start, 0.0


def worker(args: argparse.Namespace) -> None:
    before = vm_hwm_bytes()
    if args.worker == "append":
        seconds, close = _append(args.src, args.dst, args.codec)
    elif args.worker == "copyfile":
        seconds, close = _copy(shutil.copyfile, args.src, args.dst)
    elif args.worker == "readwrite":
        seconds, close = _copy(read_write, args.src, args.dst)
    else:
        seconds, close = _read_through(args.src)
    emit({"seconds": seconds, "close": close, "hwm_before": before, "hwm_after": vm_hwm_bytes()})


# ---- main side ----------------------------------------------------------------------


def settle(src: Path) -> None:
    """Flushes dirty pages, touches and frees memory the size of the source (plus
    some), and reads the source into the page cache."""
    os.sync()
    prefault(src.stat().st_size)
    read_write(src, None)


def _jobs(peer) -> tuple[list[tuple], list[str]]:
    """(label, interpreter, worker kind, codec) of every measurement, and notes
    about those that cannot run."""
    me = sys.executable
    jobs = [
        ("shutil.copyfile", me, "copyfile", "-"),
        ("read+write loop, 4 MiB", me, "readwrite", "-"),
    ]
    jobs += [(f"loaderx {c}", me, "append", c) for c in CODECS]
    peer_py, peer_info = peer
    notes = [] if peer_py else [f"peer loaderx 2.8.6: not run ({peer_info})"]
    if peer_py:
        jobs += [(f"peer {peer_info} {c}", peer_py, "append", c) for c in CODECS]
    jobs.append(("mmap read-through, no writer", me, "read", "-"))
    return jobs, notes


def measure(src: Path, root: Path, rounds: int, peer) -> tuple[dict, list[str]]:
    """Median round (by time) of every job, with the disk bytes it wrote."""
    jobs, notes = _jobs(peer)
    results: dict[str, list[dict]] = {job[0]: [] for job in jobs}
    for _ in range(rounds):
        for label, python, kind, codec in jobs:
            if label not in results:  # failed in an earlier round
                continue
            dst = root / "out"
            settle(src)
            argv = ["-m", __spec__.name, "--worker", kind, "--src", str(src), "--dst", str(dst)]
            try:
                r = run_worker(python, [*argv, "--codec", codec])
            except RuntimeError as e:
                notes.append(f"{label}: failed ({e})")
                del results[label]
                continue
            r["kind"] = kind
            r["disk"] = disk_bytes(dst) if dst.exists() else 0
            results[label].append(r)
            if dst.is_dir():
                shutil.rmtree(dst)
            else:
                dst.unlink(missing_ok=True)
    by_time = {k: sorted(v, key=lambda r: r["seconds"] + r["close"]) for k, v in results.items()}
    return {k: v[len(v) // 2] for k, v in by_time.items()}, notes


def print_tables(results: dict, source_bytes: int) -> None:
    mib = source_bytes / MIB
    speed, rss = [], []
    for label, r in results.items():
        if r["kind"] != "read":
            total = r["seconds"] + r["close"]
            rate = f"{mib / r['seconds']:.0f}"
            speed.append(
                [label, f"{r['seconds']:.2f}", rate, f"{mib / total:.0f}", f"{r['disk']:,}"]
            )
        if r["kind"] in ("append", "read"):
            grew = r["hwm_after"] - r["hwm_before"]
            hwm = [f"{r[k] / MIB:.0f}" for k in ("hwm_before", "hwm_after")]
            share = f"{grew / source_bytes:.1%}"
            rss.append([label, f"{mib:.0f}", *hwm, f"{grew / MIB:.0f}", share])
    print("Throughput (source bytes per second)\n")
    print(table(["method", "seconds", "MiB/s", "+ sync MiB/s", "disk bytes"], speed))
    print("\nPeak RSS of the process (VmHWM, MiB)\n")
    print(table(["process", "source", "before", "after", "increase", "of source"], rss))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="~256 MiB source, one round")
    ap.add_argument("--dir", help="where the source and stores go (default: a new /tmp folder)")
    ap.add_argument("--peer-python", help="interpreter of a venv with loaderx 2.8.6")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per method (default 3)")
    for hidden in ("--worker", "--src", "--dst", "--codec"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    args.rounds = args.rounds or (1 if args.quick else 3)
    with one_bench_at_a_time():
        run(args)


def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-write-", dir=args.dir))
    n = (256 if args.quick else 2048) * MIB // int(np.prod(RECORD_SHAPE))
    print(f"Machine: {machine()}")
    print(f"loaderx checkout: {checkout()}")
    print(f"Load average at start: {load_average()}")
    try:
        src = root / "images.npy"
        make_source(src, "images", n)
        print(
            f"Source: {n:,} synthetic uint8{RECORD_SHAPE} records, "
            f"{src.stat().st_size / MIB:.0f} MiB .npy, memory-mapped read-only, "
            f"one append call, data_shards=4; median of {args.rounds} interleaved rounds\n"
        )
        results, notes = measure(src, root, args.rounds, peer_python(args.peer_python))
        print_tables(results, src.stat().st_size)
        for note in notes:
            print(note)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nLoad average at end: {load_average()}")


if __name__ == "__main__":
    main()
