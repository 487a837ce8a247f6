"""The ``loaderx`` command line: one module per command, each with an ``add``
that declares its arguments and a ``run`` that carries it out."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from . import bench, clean, concat, convert, info, verify
from ._common import USAGE

_COMMANDS = (info, verify, convert, concat, clean, bench)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="loaderx",
        description="Inspect, verify, convert, concatenate and clean Zrecord stores.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def new(name: str, about: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=about, description=about)

    for command in _COMMANDS:
        command.add(new)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with `argv` (default ``sys.argv[1:]``) and returns
    the exit status."""
    ap = parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else USAGE
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)
