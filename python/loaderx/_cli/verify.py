"""``loaderx verify``: every record of each store re-hashed and decoded."""

from __future__ import annotations

import argparse
import sys
import time

from ._common import (
    FAILED,
    OK,
    READ_ERRORS,
    NewCommand,
    each_store,
    error_line,
    open_reader,
    storage_option_arg,
)


def run(args: argparse.Namespace) -> int:
    status = OK
    for path in each_store(args.paths):
        t0 = time.perf_counter()
        try:
            with open_reader(path, dict(args.storage_options or [])) as r:
                r.verify(progress=not args.quiet)
                n = len(r)
        except READ_ERRORS as e:
            status = FAILED
            print(error_line(path, e), file=sys.stderr)
            continue
        print(f"{path}: {n:,} records intact ({time.perf_counter() - t0:.2f} s)")
    return status


def add(new: NewCommand) -> None:
    about = "re-hash and decode every record of stores"
    p = new("verify", about)
    p.add_argument("paths", nargs="+", metavar="PATH")
    storage_option_arg(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)
