"""Command line: ``python -m loaderx info PATH...`` and ``python -m loaderx verify PATH...``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import _native
from .zrecord import ZrecordError


def _disk_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def info(path: str) -> str:
    s = _native.Store.open(path)
    shape = f"item_shape={tuple(s.item_shape)}" if s.kind == "dense" else f"ndim={s.ndim}"
    return (
        f"{path}: {s.kind.capitalize()} {s.dtype} {shape}, {len(s)} records, codec={s.codec}, "
        f"data_shards={s.data_shards}, {_disk_bytes(path):,} bytes on disk"
    )


def verify(path: str) -> str:
    s = _native.Store.open(path)
    t0 = time.perf_counter()
    s.verify()
    return f"{path}: {len(s)} records intact ({time.perf_counter() - t0:.2f} s)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loaderx", description="Inspect Zrecord stores.")
    ap.add_argument("command", choices=["info", "verify"])
    ap.add_argument("paths", nargs="+", metavar="PATH")
    args = ap.parse_args(argv)
    run = info if args.command == "info" else verify
    status = 0
    for p in args.paths:
        try:
            print(run(p))
        except (OSError, ZrecordError) as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
