"""``loaderx clean``: the build directories killed writers left behind, or for
a URL the job prefixes killed engine drivers left."""

from __future__ import annotations

import argparse
import sys

from ..zrecord import clean
from ._common import OK, USAGE, NewCommand, error_line


def run(args: argparse.Namespace) -> int:
    status = OK
    for p in args.paths:
        try:
            for removed in clean(p):
                print(f"removed {removed}")
        except OSError as e:
            print(error_line(p, e), file=sys.stderr)
            status = USAGE
    return status


def add(new: NewCommand) -> None:
    about = "remove build directories killed writers left (a URL: killed engine jobs' prefixes)"
    p = new("clean", about)
    p.add_argument("paths", nargs="+", metavar="DIR")
    p.set_defaults(run=run)
