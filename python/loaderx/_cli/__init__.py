"""The ``loaderx`` command line: one module per command, each with an ``add``
that declares its arguments and a ``run`` that carries it out."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable, Sequence

from . import bench, clean, concat, convert, info, profile, verify
from ._common import FAILED, USAGE

_COMMANDS = (info, verify, convert, concat, clean, bench, profile)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="loaderx",
        description=(
            "Inspect, verify, convert, concatenate and clean Zrecord stores; "
            "benchmark and profile reading them."
        ),
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def new(name: str, about: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=about, description=about)

    for command in _COMMANDS:
        command.add(new)
    return ap


def _print_paths_as_given() -> None:
    """Lets the process's own stdout and stderr print paths whose bytes are not
    UTF-8 (which Python holds as surrogates) as those bytes, instead of failing
    on the first such path in the output."""
    for stream in (sys.__stdout__, sys.__stderr__):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with `argv` (default ``sys.argv[1:]``) and returns
    the exit status."""
    _print_paths_as_given()
    ap = parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else USAGE
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except BrokenPipeError:
        # The reader of our output went away (`loaderx info ... | head`): stop
        # quietly, and keep the interpreter's final flush from failing again.
        if sys.__stdout__ is not None:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.__stdout__.fileno())
            os.close(devnull)
        return FAILED
