"""Command line: ``python -m loaderx info|verify|clean PATH...``.

``info`` and ``verify`` exit 1 when a store cannot be read. ``clean`` removes the
build directories that killed writers left inside each PATH (never a live
writer's), prints one ``removed PATH`` line for each, and exits 2 when a PATH is
not a directory it can list."""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import _native
from .zrecord import ZrecordError, clean


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


def _clean(paths: list[str]) -> int:
    status = 0
    for p in paths:
        try:
            for removed in clean(p):
                print(f"removed {removed}")
        except OSError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 2
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m loaderx", description="Inspect Zrecord stores; clean stale builds."
    )
    ap.add_argument("command", choices=["info", "verify", "clean"])
    ap.add_argument("paths", nargs="+", metavar="PATH")
    args = ap.parse_args(argv)
    if args.command == "clean":
        return _clean(args.paths)
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
