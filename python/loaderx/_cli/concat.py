"""``loaderx concat``: one store from part stores of one schema."""

from __future__ import annotations

import argparse
import sys

from ..zrecord import concat
from ._common import FAILED, OK, READ_ERRORS, NewCommand, error_text


def run(args: argparse.Namespace) -> int:
    try:
        r = concat(
            args.parts, args.dest, verify=args.verify, copy=args.copy, progress=not args.quiet
        )
    except READ_ERRORS as e:
        print(f"error: {error_text(e)}", file=sys.stderr)
        return FAILED
    print(
        f"{r.path}: {r.records:,} records from {len(args.parts)} parts, {r.data_files} data "
        f"files ({r.linked_files} linked, {r.copied_files} copied)"
    )
    return OK


def add(new: NewCommand) -> None:
    about = "publish one store from part stores of one schema"
    p = new("concat", about)
    p.add_argument("parts", nargs="+", metavar="PART")
    p.add_argument("dest", metavar="DEST", help="the new store")
    p.add_argument("--copy", action="store_true", help="copy data files instead of linking")
    p.add_argument("--verify", action="store_true", help="check every part's records first")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.set_defaults(run=run)
