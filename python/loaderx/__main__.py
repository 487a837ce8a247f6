"""The ``loaderx`` command line (also ``python -m loaderx``).

Subcommands (``loaderx COMMAND --help`` for their options; docs/cli.md has
examples and the ``--json`` schema):

``info PATH...``
    Each store at PATH, or every store under a directory PATH (a converted root):
    kind, dtype, shape, records, codec, data files, logical and stored bytes,
    compression ratio, elements per record (Ragged), attributes and codec advice.
    Sizes come from the index; no record is read, except a small sample of a raw
    store's records to estimate what zstd would save. ``--json`` prints one JSON
    document.
``verify PATH...``
    Re-hashes and decodes every record of each store (with a progress bar on a
    terminal); a damaged store is reported with its file and record.
``convert SRC DEST``
    Writes a dataset (a ``save_to_disk`` directory, a ``.parquet`` or ``.arrow``
    file, or a Hugging Face Hub id) as stores under DEST, through
    ``loaderx.converter``; needs the ``converter`` extra.
``concat PART... DEST``
    Publishes at DEST one store holding the records of the PART stores, in the
    order given, without decoding a record (``loaderx.zrecord.concat``: data
    files hard-linked, or copied with ``--copy`` or across filesystems).
``clean DIR...``
    Removes the build directories killed writers left in each DIR (never a live
    writer's) and prints one ``removed PATH`` line for each.
``bench PATH``
    Random-gather throughput of one store on this machine, in records/s and MiB/s
    of logical (decoded) bytes.

A PATH that is a URL (``s3://``, ``https://``...) goes to the readers' ``open``
unchanged; ``info`` and ``verify`` pass it the storage options given with
``-o KEY=VALUE`` (repeatable; docs/remote.md).

Exit status: 0 when everything succeeded; 1 when a store or source failed to
open, read, verify or convert (the others are still processed); 2 for a usage
error (a bad option, or a ``clean`` DIR that is not a directory it can list).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from . import _native
from .errors import InvalidArgumentError, LoaderxError
from .utils import codec_advice
from .zrecord import Dense, Ragged, StorageOptions, ZrecordError, clean, concat
from .zrecord import open as open_store

__all__ = ["find_stores", "main", "store_info"]

OK, FAILED, USAGE = 0, 1, 2

# At most this many records, and bytes, of a raw store are sampled to see what
# zstd would save.
SAMPLE_RECORDS = 64
SAMPLE_BYTES = 4 << 20
# Records whose sizes one call reads from the index.
_INDEX_STEP = 1 << 20


def _is_url(path: str) -> bool:
    return "://" in path


def _open(path: str, storage_options: Mapping[str, str] | None = None) -> Dense | Ragged:
    """A reader of whichever kind the store at `path` (or URL) is."""
    if not _native.is_url(path):
        if storage_options:
            raise InvalidArgumentError(f"{path}: storage options apply to store URLs only")
        return open_store(path)
    return open_store(path, storage_options=cast(StorageOptions, storage_options))


def find_stores(path: str) -> list[str]:
    """`path` itself when it is a store or a URL, else every store under the
    directory `path` (recursively, in sorted order, build directories skipped).
    A directory holding a header or an index counts as a store, so that one whose
    header was lost is reported when opened rather than skipped. A directory
    without stores is returned as itself, so that opening it says why it is not
    one."""
    if _is_url(path) or not os.path.isdir(path):
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


def _sizes(reader: Dense | Ragged) -> tuple[int, int, np.ndarray | None]:
    """Logical and stored bytes of every record, and for Ragged each record's
    element count, all from the index."""
    store = reader._store()  # pyright: ignore[reportPrivateUsage]
    n = len(reader)
    logical = stored = 0
    elements: list[np.ndarray] = []
    itemsize = np.dtype(reader.dtype).itemsize if isinstance(reader, Ragged) else 0
    for start in range(0, n, _INDEX_STEP):
        lg, st = store.record_sizes(start, min(start + _INDEX_STEP, n))
        logical += int(lg.sum())
        stored += int(st.sum())
        if itemsize:
            elements.append(lg // np.uint64(itemsize))
    if not itemsize:
        return logical, stored, None
    return logical, stored, np.concatenate(elements) if elements else np.empty(0, np.uint64)


def _nearest_rank(sorted_values: np.ndarray, pct: float) -> int:
    """The smallest value with at least `pct` percent of the values at or below it."""
    k = max(int(np.ceil(pct / 100 * len(sorted_values))), 1)
    return int(sorted_values[k - 1])


def _length_stats(elements: np.ndarray) -> dict[str, float | int] | None:
    if elements.size == 0:
        return None
    s = np.sort(elements)
    return {
        "min": int(s[0]),
        "mean": float(s.mean()),
        "max": int(s[-1]),
        "p50": _nearest_rank(s, 50),
        "p90": _nearest_rank(s, 90),
        "p99": _nearest_rank(s, 99),
    }


def _zstd_sample_ratio(reader: Dense | Ragged, logical_bytes: int) -> float | None:
    """What plain zstd does on up to SAMPLE_RECORDS records spread evenly over
    the store (SAMPLE_BYTES at most); None when there is nothing to sample."""
    n = len(reader)
    if n == 0 or logical_bytes == 0:
        return None
    per = max(logical_bytes // n, 1)
    k = int(min(SAMPLE_RECORDS, n, max(SAMPLE_BYTES // per, 1)))
    pos = np.linspace(0, n - 1, k).astype(np.int64)
    if isinstance(reader, Dense):
        data = np.ascontiguousarray(np.asarray(reader.gather(pos))).reshape(-1).view(np.uint8)
        sizes = [data.size // k] * k
    else:
        batch = reader.gather(pos)
        values = np.asarray(batch.values).view(np.uint8)
        cu = np.asarray(batch.cu_seqlens).astype(np.int64) * reader.dtype.itemsize
        data, sizes = values, np.diff(cu).tolist()
    if data.size == 0:
        return None
    return data.size / max(_native.encoded_size("zstd", data, sizes), 1)


def store_info(path: str, storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything ``info`` reports about the store at `path` (or URL, reached
    with `storage_options`), as the JSON document's ``stores`` entries hold it
    (docs/cli.md)."""
    with _open(path, storage_options) as r:
        store = r._store()  # pyright: ignore[reportPrivateUsage]
        logical, stored, elements = _sizes(r)
        sample = None
        if r.codec == "raw":
            try:
                sample = _zstd_sample_ratio(r, logical)
            except ImportError:  # an ml_dtypes dtype without ml_dtypes: no sample
                sample = None
        advice = codec_advice(r.codec, len(r), logical, stored, sample)
        files = store.data_file_sizes
        return {
            "path": path,
            "kind": store.kind,
            "dtype": store.dtype,
            "item_shape": list(store.item_shape) if store.kind == "dense" else None,
            "ndim": store.ndim if store.kind == "ragged" else len(store.item_shape),
            "records": len(r),
            "codec": r.codec,
            "format_version": r.format_version,
            "header_checksum": f"{r.header_checksum:#018x}",
            "data_files": len(files),
            "data_file_bytes": sum(files),
            "logical_bytes": logical,
            "stored_bytes": stored,
            "ratio": logical / stored if stored else None,
            "elements_per_record": None if elements is None else _length_stats(elements),
            "attrs": r.attrs,
            "advice": None if advice is None else {"codec": advice.codec, "reason": advice.reason},
        }


def _bytes(n: float) -> str:
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:,.1f} {name}"
    return f"{n:,.0f} B"


def _info_text(d: dict[str, Any]) -> str:
    shape = f"item_shape={tuple(d['item_shape'])}" if d["kind"] == "dense" else f"ndim={d['ndim']}"
    lines = [
        f"{d['path']}: {d['kind'].capitalize()} {d['dtype']} {shape}, {d['records']:,} records, "
        f"codec={d['codec']}, data_shards={d['data_files']}",
        f"  data files  {d['data_files']} holding {d['data_file_bytes']:,} bytes "
        f"(format version {d['format_version']}, header checksum {d['header_checksum']})",
        f"  logical     {d['logical_bytes']:,} bytes ({_bytes(d['logical_bytes'])})",
        f"  stored      {d['stored_bytes']:,} bytes ({_bytes(d['stored_bytes'])})"
        + (f", ratio {d['ratio']:.2f}x" if d["ratio"] is not None else ""),
    ]
    e = d["elements_per_record"]
    if e is not None:
        lines.append(
            f"  elements    per record: min {e['min']:,}, mean {e['mean']:,.1f}, max {e['max']:,}; "
            f"p50 {e['p50']:,}, p90 {e['p90']:,}, p99 {e['p99']:,}"
        )
    if d["attrs"]:
        lines.append(f"  attrs       {json.dumps(d['attrs'], ensure_ascii=False)}")
    if d["advice"] is not None:
        lines.append(f"  advice      {d['advice']['codec']}: {d['advice']['reason']}")
    return "\n".join(lines)


def _error(e: BaseException) -> str:
    msg = str(e)
    if isinstance(e, ZrecordError):
        if e.path is not None:
            msg += f"\n  file: {os.fspath(e.path)}"
        if e.record is not None:
            msg += f"\n  record: {e.record}"
    return msg


_READ_ERRORS = (OSError, LoaderxError, ImportError)


def _each_store(paths: Sequence[str]) -> Iterator[str]:
    for p in paths:
        yield from find_stores(p)


def _info(args: argparse.Namespace) -> int:
    status = OK
    stores: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for path in _each_store(args.paths):
        try:
            d = store_info(path, dict(args.storage_options or []))
        except _READ_ERRORS as e:
            status = FAILED
            if args.json:
                failures.append(_failure(path, e))
            else:
                print(f"error: {path}: {_error(e)}", file=sys.stderr)
            continue
        if args.json:
            stores.append(d)
        else:
            print(_info_text(d))
    if args.json:
        print(json.dumps({"stores": stores, "errors": failures}, indent=2, ensure_ascii=False))
    return status


def _failure(path: str, e: BaseException) -> dict[str, Any]:
    zr = isinstance(e, ZrecordError)
    return {
        "path": path,
        "error": type(e).__name__,
        "message": str(e),
        "file": os.fspath(e.path) if zr and e.path is not None else None,
        "record": e.record if zr else None,
    }


def _verify(args: argparse.Namespace) -> int:
    status = OK
    for path in _each_store(args.paths):
        t0 = time.perf_counter()
        try:
            with _open(path, dict(args.storage_options or [])) as r:
                r.verify(progress=not args.quiet)
                n = len(r)
        except _READ_ERRORS as e:
            status = FAILED
            print(f"error: {path}: {_error(e)}", file=sys.stderr)
            continue
        print(f"{path}: {n:,} records intact ({time.perf_counter() - t0:.2f} s)")
    return status


def _clean(args: argparse.Namespace) -> int:
    status = OK
    for p in args.paths:
        try:
            for removed in clean(p):
                print(f"removed {removed}")
        except OSError as e:
            print(f"error: {e}", file=sys.stderr)
            status = USAGE
    return status


def _convert(args: argparse.Namespace) -> int:
    from . import converter

    try:
        dataset = converter.load_source(args.src, config=args.config, revision=args.revision)
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
    except _READ_ERRORS as e:
        print(f"error: {_error(e)}", file=sys.stderr)
        return FAILED
    print(os.fspath(done))
    for advice in done.advice:
        print(f"advice: {advice}", file=sys.stderr)
    return OK


def _concat(args: argparse.Namespace) -> int:
    try:
        r = concat(
            args.parts, args.dest, verify=args.verify, copy=args.copy, progress=not args.quiet
        )
    except _READ_ERRORS as e:
        print(f"error: {_error(e)}", file=sys.stderr)
        return FAILED
    print(
        f"{r.path}: {r.records:,} records from {len(args.parts)} parts, {r.data_files} data "
        f"files ({r.linked_files} linked, {r.copied_files} copied)"
    )
    return OK


def _bench_once(
    path: str, batch_size: int, steps: int, seed: int, threads: int | None
) -> dict[str, Any]:
    with _open(path) as r:
        n = len(r)
        if n == 0:
            raise ZrecordError(f"{path}: the store is empty; there is nothing to gather")
        rng = np.random.default_rng(seed)
        draws = [rng.integers(0, n, batch_size, dtype=np.int64) for _ in range(steps + 2)]
        logical = 0
        for pos in draws[:2]:  # warm-up: pools and page cache
            r.gather(pos)
        t0 = time.perf_counter()
        for pos in draws[2:]:
            out = r.gather(pos)
            logical += out.nbytes if isinstance(out, _native.DLTensor) else out.values.nbytes
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


def _bench(args: argparse.Namespace) -> int:
    if args.threads is not None and os.environ.get("LOADERX_NUM_THREADS") != str(args.threads):
        # The engine reads its thread count once per process: measure in a fresh one.
        env = {**os.environ, "LOADERX_NUM_THREADS": str(args.threads)}
        cmd = [sys.executable, "-m", "loaderx", "bench", args.path]
        cmd += ["--batch-size", str(args.batch_size), "--steps", str(args.steps)]
        cmd += ["--seed", str(args.seed), "--threads", str(args.threads)]
        cmd += ["--json"] if args.json else []
        return subprocess.run(cmd, env=env, check=False).returncode
    try:
        d = _bench_once(args.path, args.batch_size, args.steps, args.seed, args.threads)
    except _READ_ERRORS as e:
        print(f"error: {args.path}: {_error(e)}", file=sys.stderr)
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


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not positive")
    return v


def _key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _storage_option_arg(p: argparse.ArgumentParser) -> None:
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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="loaderx",
        description="Inspect, verify, convert, concatenate and clean Zrecord stores.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands: dict[str, Callable[[argparse.Namespace], int]] = {}

    def add(
        name: str, run: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        commands[name] = run
        return sub.add_parser(name, help=help, description=help)

    p = add("info", _info, "describe stores, or every store under a directory")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    _storage_option_arg(p)
    p = add("verify", _verify, "re-hash and decode every record of stores")
    p.add_argument("paths", nargs="+", metavar="PATH")
    _storage_option_arg(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p = add("convert", _convert, "convert a dataset into stores (the converter extra)")
    p.add_argument(
        "src", metavar="SRC", help="save_to_disk directory, .parquet/.arrow file or Hub id"
    )
    p.add_argument("dest", metavar="DEST", help="the new root directory")
    p.add_argument("--codec", choices=list(_native.CODECS), default="zstd")
    p.add_argument("--data-shards", type=_positive, default=_native.DEFAULT_DATA_SHARDS)
    p.add_argument("--config", help="the Hub dataset's configuration")
    p.add_argument("--revision", help="the Hub dataset's revision (branch, tag or commit)")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p = add("concat", _concat, "publish one store from part stores of one schema")
    p.add_argument("parts", nargs="+", metavar="PART")
    p.add_argument("dest", metavar="DEST", help="the new store")
    p.add_argument("--copy", action="store_true", help="copy data files instead of linking")
    p.add_argument("--verify", action="store_true", help="check every part's records first")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p = add("clean", _clean, "remove build directories killed writers left")
    p.add_argument("paths", nargs="+", metavar="DIR")
    p = add("bench", _bench, "random-gather throughput of a store on this machine")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--batch-size", type=_positive, default=256)
    p.add_argument("--steps", type=_positive, default=100)
    p.add_argument("--threads", type=_positive, help="gather threads (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    ap.set_defaults(_commands=commands)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with `argv` (default ``sys.argv[1:]``) and returns
    the exit status."""
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else USAGE
    commands: dict[str, Callable[[argparse.Namespace], int]] = args._commands
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
