"""What the commands share: exit statuses, the errors a store can raise and how
they are printed, finding and opening stores, and argument types."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias, cast

from .. import _native
from ..errors import InvalidArgumentError, LoaderxError
from ..zrecord import Dense, Ragged, StorageOptions, ZrecordError
from ..zrecord import open as open_store

OK, FAILED, USAGE = 0, 1, 2

# Declares a command, given its name and one line about it; returns its parser.
NewCommand: TypeAlias = Callable[[str, str], argparse.ArgumentParser]

# What reading a store can raise that is reported per store, not as a crash.
READ_ERRORS = (OSError, LoaderxError, ImportError)


def open_reader(path: str, storage_options: Mapping[str, str] | None = None) -> Dense | Ragged:
    """A reader of whichever kind the store at `path` (or URL) is."""
    if not _native.is_url(path):
        if storage_options:
            raise InvalidArgumentError(f"{path}: storage options apply to store URLs only")
        return open_store(path)
    # The command line gives every value as a string, which the native side parses.
    return open_store(path, storage_options=cast(StorageOptions, storage_options))


def find_stores(path: str) -> list[str]:
    """`path` itself when it is a store or a URL, else every store under the
    directory `path` (recursively, in sorted order, build directories skipped).
    A directory holding a header or an index counts as a store, so that one whose
    header was lost is reported when opened rather than skipped. A directory
    without stores is returned as itself, so that opening it says why it is not
    one."""
    if _native.is_url(path) or not os.path.isdir(path):
        return [path]
    if os.path.exists(os.path.join(path, _native.HEADER_FILE)):
        return [path]
    found: list[str] = []
    for top, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if top != path and (_native.HEADER_FILE in files or _native.INDEX_FILE in files):
            found.append(top)
            dirs[:] = []  # a store holds no stores
    return found or [path]


def each_store(paths: Sequence[str]) -> Iterator[str]:
    for p in paths:
        yield from find_stores(p)


def message(e: BaseException) -> str:
    """The exception's own message: for an OSError its text and file, without the
    ``[Errno N]`` and the repr of the file that ``str()`` adds."""
    if isinstance(e, OSError) and e.strerror:
        msg = str(e.strerror)
        if e.filename is not None:
            name = os.fsdecode(cast("str | bytes | os.PathLike[str]", e.filename))
            if name not in msg:
                msg = f"{name}: {msg}"
        return msg
    return str(e)


def error_text(e: BaseException) -> str:
    """The message, and for a damaged store the file and record it names."""
    msg = message(e)
    if isinstance(e, ZrecordError):
        if e.path is not None:
            msg += f"\n  file: {os.fspath(e.path)}"
        if e.record is not None:
            msg += f"\n  record: {e.record}"
    return msg


def error_line(path: str, e: BaseException) -> str:
    """What a command prints for a store or source that failed: ``error: PATH:``
    and the message, the path once when the message starts with it."""
    text = error_text(e)
    # The native side writes a path of undecodable bytes with replacement
    # characters; the path as given takes its place.
    shown = os.fsencode(path).decode("utf-8", "replace")
    for prefix in (f"{path}:", f"{shown}:"):
        if text.startswith(prefix):
            return f"error: {path}:{text[len(prefix) :]}"
    return f"error: {path}: {text}"


def failure(path: str, e: BaseException) -> dict[str, Any]:
    """An error as the ``--json`` documents list it."""
    zr = isinstance(e, ZrecordError)
    return {
        "path": path,
        "error": type(e).__name__,
        "message": message(e),
        "file": os.fspath(e.path) if zr and e.path is not None else None,
        "record": e.record if zr else None,
    }


def _integer(text: str, least: int, why: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"{v} {why}")
    return v


def positive(text: str) -> int:
    return _integer(text, 1, "is not positive")


def non_negative(text: str) -> int:
    return _integer(text, 0, "is negative")


def _key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def storage_option_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--storage-option",
        dest="storage_options",
        type=_key_value,
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="an object-store option for URL paths, such as aws_endpoint=... (repeatable)",
    )
