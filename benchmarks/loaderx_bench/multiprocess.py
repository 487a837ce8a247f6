"""Benchmark: data-parallel loading, per-process and aggregate Loader throughput
with 1, 2 and 4 processes.

One synthetic Dense store (``--records`` uint8 records of ``--shape``, codec
``--codec``; each byte holds 5 bits of a hash of its record and place, so zstd
compresses it to about 5/8 and decodes real work) is written to a temporary
directory. For each process count ``P``, ``P`` plain OS
processes (``python -m loaderx_bench.multiprocess --child ...``) each build a
Loader over it with ``process_index=i, process_count=P`` (one binding, ``workers``
loader threads, a CYCLIC sampler of global batch ``--batch``), so that each
gathers ``batch / P`` records of every global batch. Explicit arguments take the
same per-step path as ranks found from JAX or torch.distributed: the runtime is
asked once, at construction.

Each child first checks its first ``--check`` steps: its rows must be the records
at its slice ``[i*B/P, (i+1)*B/P)`` of the global batch a fresh Sampler draws, byte
for byte. It then warms up, reports ready, and waits; the parent starts every
child of the group at once, and each child times ``--steps`` steps. Per-process
throughput is its records over its time; aggregate throughput is the global
batch's records times the steps over the slowest child's time (the rate at which
the whole group delivers global batches). The ratio is against one process in the
same run. The CPU time of all the group's processes (``time.process_time``, every
thread) per record of the global batch shows what the split costs independently
of how many cores the group got on a shared machine. Process counts take turns
for ``--rounds`` rounds; medians are printed.

Usage: python scripts/bench_multiprocess.py [--records 4096] [--shape 3,64,64]
       [--codec zstd] [--batch 256] [--steps 200] [--workers 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time

COUNTS = (1, 2, 4)
SAMPLER_SEED = 7


def records(positions: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The store's records at `positions`, computed rather than read: 5 bits of a
    64-bit mix of (record, byte place) per byte, so that zstd has work to do."""
    flat = int(np.prod(shape))
    x = (positions.astype(np.uint64)[:, None] << np.uint64(32)) | np.arange(flat, dtype=np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return (x & np.uint64(0x1F)).astype(np.uint8).reshape(-1, *shape)


def write_store(path: Path, count: int, shape: tuple[int, ...], codec: str) -> None:
    from loaderx.zrecord import Dense

    with Dense.create(path, np.uint8, shape, codec=codec) as w:
        w.append(records(np.arange(count), shape))


def child(args: argparse.Namespace) -> None:
    from loaderx.dataloader import Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense

    shape = tuple(int(d) for d in args.shape.split(","))
    index, count = args.index, args.count
    local = args.batch // count
    with Dense.open(args.store) as x:
        sampler = Sampler(len(x), args.batch, Sampler.Mode.CYCLIC, seed=SAMPLER_SEED)
        reference = Sampler(len(x), args.batch, Sampler.Mode.CYCLIC, seed=SAMPLER_SEED)
        with Loader(
            {"x": [x]},
            sampler,
            workers=args.workers,
            prefetch=2,
            process_index=index,
            process_count=count,
        ) as loader:
            for _ in range(args.check):
                got = np.from_dlpack(next(loader)[0]["x"])
                mine = reference.next()[index * local : (index + 1) * local]
                if not np.array_equal(got, records(mine, shape)):
                    raise SystemExit(f"process {index} of {count}: wrong records")
            for _ in range(args.warmup):
                next(loader)
            print(json.dumps({"ready": index}), flush=True)
            sys.stdin.readline()  # the parent's start signal
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                next(loader)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    report = {"index": index, "seconds": elapsed, "cpu": cpu, "records": local * args.steps}
    print(json.dumps(report))


def run_group(args: argparse.Namespace, store: Path, count: int) -> list[dict[str, float]]:
    """Starts `count` children, releases them together, returns their reports."""
    procs = []
    for index in range(count):
        cmd = [
            sys.executable, "-m", "loaderx_bench.multiprocess", "--child",
            "--store", str(store), "--index", str(index), "--count", str(count),
            "--shape", args.shape, "--batch", str(args.batch), "--steps", str(args.steps),
            "--workers", str(args.workers), "--check", str(args.check),
            "--warmup", str(args.warmup),
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    try:
        for p in procs:
            line = p.stdout.readline() if p.stdout else ""
            if not line:
                raise SystemExit(f"a child of the {count}-process group failed before timing")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, _ = p.communicate(timeout=600)
            if p.returncode:
                raise SystemExit(f"a child of the {count}-process group exited {p.returncode}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=4096)
    ap.add_argument("--shape", default="3,64,64")
    ap.add_argument("--codec", default="zstd", choices=["raw", "zstd"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check", type=int, default=20, help="steps checked before timing")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.child:
        child(args)
        return 0
    if args.batch % max(COUNTS):
        raise SystemExit(f"--batch {args.batch} must divide by {max(COUNTS)} processes")
    shape = tuple(int(d) for d in args.shape.split(","))
    print(f"machine: {machine()}")
    print(f"loaderx: {checkout()}")
    record_bytes = int(np.prod(shape))
    print(
        f"store: {args.records} uint8 records of {shape} ({record_bytes} bytes), codec "
        f"{args.codec}; global batch {args.batch}; {args.steps} timed steps per process; "
        f"Loader workers={args.workers}, prefetch=2, one binding; {args.rounds} rounds"
    )
    results: dict[int, list[tuple[list[float], float, float]]] = {c: [] for c in COUNTS}
    with one_bench_at_a_time(), tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "x"
        write_store(store, args.records, shape, args.codec)
        print(f"load average before: {load_average()}")
        for r in range(args.rounds):
            order = COUNTS if r % 2 == 0 else COUNTS[::-1]
            for count in order:
                reports = run_group(args, store, count)
                per = [rep["records"] / rep["seconds"] for rep in reports]
                aggregate = args.batch * args.steps / max(rep["seconds"] for rep in reports)
                cpu = sum(rep["cpu"] for rep in reports) / (args.batch * args.steps)
                results[count].append((per, aggregate, cpu))
        print(f"load average after: {load_average()}")
    print(f"all outputs checked: {args.check} steps per process matched the records")
    print()
    print(
        "| processes | per-process k records/s (each) | aggregate k records/s | vs 1 process "
        "| CPU µs per record, all processes |"
    )
    print("|---:|---|---:|---:|---:|")
    base = statistics.median(a for _, a, _ in results[1])
    for count in COUNTS:
        per = [statistics.median(p[i] for p, _, _ in results[count]) for i in range(count)]
        aggregate = statistics.median(a for _, a, _ in results[count])
        cpu = statistics.median(c for _, _, c in results[count])
        each = ", ".join(f"{v / 1e3:.1f}" for v in per)
        print(
            f"| {count} | {each} | {aggregate / 1e3:.1f} | {aggregate / base:.2f}x "
            f"| {cpu * 1e6:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
