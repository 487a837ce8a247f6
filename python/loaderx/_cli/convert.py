"""``loaderx convert``: a dataset written as stores (the converter extra)."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from .. import _native
from ._common import FAILED, OK, READ_ERRORS, NewCommand, error_line, error_text, message, positive


def run(args: argparse.Namespace) -> int:
    from .. import converter

    try:
        dataset = converter.load_source(args.src, config=args.config, revision=args.revision)
    except READ_ERRORS as e:
        print(error_line(args.src, e), file=sys.stderr)
        return FAILED
    except Exception as e:  # datasets' and huggingface_hub's own, for a source they refuse
        print(f"error: {args.src}: cannot be loaded: {message(e)}", file=sys.stderr)
        return FAILED
    try:
        with warnings.catch_warnings():
            # Printed below as lines of their own rather than as Python warnings.
            warnings.simplefilter("ignore", converter.CodecAdviceWarning)
            done = converter.convert(
                dataset,
                args.dest,
                codec=args.codec,
                data_shards=args.data_shards,
                progress=not args.quiet,
            )
    except READ_ERRORS as e:
        print(f"error: {error_text(e)}", file=sys.stderr)
        return FAILED
    print(os.fspath(done))
    for advice in done.advice:
        print(f"advice: {advice}", file=sys.stderr)
    return OK


def add(new: NewCommand) -> None:
    about = "convert a dataset into stores (the converter extra)"
    p = new("convert", about)
    p.add_argument(
        "src", metavar="SRC", help="save_to_disk directory, .parquet/.arrow file or Hub id"
    )
    p.add_argument("dest", metavar="DEST", help="the new root directory")
    p.add_argument("--codec", choices=list(_native.CODECS), default="zstd")
    p.add_argument("--data-shards", type=positive, default=_native.DEFAULT_DATA_SHARDS)
    p.add_argument("--config", help="the Hub dataset's configuration")
    p.add_argument("--revision", help="the Hub dataset's revision (branch, tag or commit)")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.set_defaults(run=run)
