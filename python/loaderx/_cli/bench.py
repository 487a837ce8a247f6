"""``loaderx bench``: random-gather throughput of one store on this machine."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from .. import set_threads
from ..errors import LoaderxError
from ..zrecord import DLTensor, ZrecordError
from ._common import FAILED, OK, READ_ERRORS, USAGE, NewCommand, error_line, open_reader, positive


def bench_once(
    path: str, batch_size: int, steps: int, seed: int, threads: int | None
) -> dict[str, Any]:
    """Times `steps` gathers of `batch_size` random records, after two to warm
    the pools and the page cache."""
    with open_reader(path) as r:
        n = len(r)
        if n == 0:
            raise ZrecordError(f"{path}: the store is empty; there is nothing to gather")
        rng = np.random.default_rng(seed)
        draws = [rng.integers(0, n, batch_size, dtype=np.int64) for _ in range(steps + 2)]
        logical = 0
        for pos in draws[:2]:
            r.gather(pos)
        t0 = time.perf_counter()
        for pos in draws[2:]:
            out = r.gather(pos)
            logical += out.nbytes if isinstance(out, DLTensor) else out.values.nbytes
        elapsed = time.perf_counter() - t0
    return {
        "path": path,
        "batch_size": batch_size,
        "steps": steps,
        "threads": threads,
        "seconds": elapsed,
        "records_per_s": batch_size * steps / elapsed,
        "mib_per_s": logical / elapsed / 2**20,
    }


def run(args: argparse.Namespace) -> int:
    if args.threads is not None:
        try:
            set_threads(args.threads)
        except LoaderxError as e:
            print(f"error: {e}", file=sys.stderr)
            return USAGE
    try:
        d = bench_once(args.path, args.batch_size, args.steps, args.seed, args.threads)
    except READ_ERRORS as e:
        print(error_line(args.path, e), file=sys.stderr)
        return FAILED
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        print(
            f"{d['path']}: {d['records_per_s']:,.0f} records/s, {d['mib_per_s']:,.1f} MiB/s "
            f"({d['steps']} random gathers of {d['batch_size']}, "
            f"{d['threads'] or 'all'} threads, {d['seconds']:.2f} s)"
        )
    return OK


def add(new: NewCommand) -> None:
    about = "random-gather throughput of a store on this machine"
    p = new("bench", about)
    p.add_argument("path", metavar="PATH")
    p.add_argument("--batch-size", type=positive, default=256)
    p.add_argument("--steps", type=positive, default=100)
    p.add_argument("--threads", type=positive, help="gather threads (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(run=run)
