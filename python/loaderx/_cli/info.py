"""``loaderx info``: what each store holds, from its header and index, and
what a raw store's records would gain from zstd."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _native
from ..utils import codec_advice
from ..zrecord import Dense, Ragged
from ._common import (
    FAILED,
    OK,
    READ_ERRORS,
    NewCommand,
    each_store,
    error_line,
    failure,
    open_reader,
    storage_option_arg,
)

if TYPE_CHECKING:
    import numpy.typing as npt

# At most this many records, and bytes, of a raw store are sampled to see what
# zstd would save.
SAMPLE_RECORDS = 64
SAMPLE_BYTES = 4 << 20


def _nearest_rank(sorted_values: npt.NDArray[np.uint64], pct: float) -> int:
    """The smallest value with at least `pct` percent of the values at or below it."""
    k = max(int(np.ceil(pct / 100 * len(sorted_values))), 1)
    return int(sorted_values[k - 1])


def length_stats(elements: npt.NDArray[np.uint64]) -> dict[str, float | int] | None:
    """Min, mean, max and percentiles of the elements per record; None for none."""
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


def zstd_sample_ratio(reader: Dense | Ragged, logical_bytes: int) -> float | None:
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
    with open_reader(path, storage_options) as r:
        stats = r.stats()
        elements = None
        if isinstance(r, Ragged):
            elements = r.record_sizes().logical // np.uint64(r.dtype.itemsize)
        sample = None
        if r.codec == "raw":
            try:
                sample = zstd_sample_ratio(r, stats.logical_bytes)
            except ImportError:  # an ml_dtypes dtype without ml_dtypes: no sample
                sample = None
        advice = codec_advice(r.codec, len(r), stats.logical_bytes, stats.stored_bytes, sample)
        dense = isinstance(r, Dense)
        return {
            "path": path,
            "kind": "dense" if dense else "ragged",
            "dtype": r.dtype_name,
            "item_shape": list(r.item_shape) if dense else None,
            "ndim": r.ndim,
            "records": len(r),
            "codec": r.codec,
            "format_version": r.format_version,
            "header_checksum": f"{r.header_checksum:#018x}",
            "data_files": stats.data_files,
            "data_file_bytes": stats.data_file_bytes,
            "logical_bytes": stats.logical_bytes,
            "stored_bytes": stats.stored_bytes,
            "ratio": stats.logical_bytes / stats.stored_bytes if stats.stored_bytes else None,
            "elements_per_record": None if elements is None else length_stats(elements),
            "attrs": r.attrs,
            "advice": None if advice is None else {"codec": advice.codec, "reason": advice.reason},
        }


def _bytes(n: float) -> str:
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:,.1f} {name}"
    return f"{n:,.0f} B"


def info_text(d: dict[str, Any]) -> str:
    """The human-readable form of one ``store_info`` document."""
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


def run(args: argparse.Namespace) -> int:
    status = OK
    stores: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for path in each_store(args.paths):
        try:
            d = store_info(path, dict(args.storage_options or []))
        except READ_ERRORS as e:
            status = FAILED
            if args.json:
                failures.append(failure(path, e))
            else:
                print(error_line(path, e), file=sys.stderr)
            continue
        if args.json:
            stores.append(d)
        else:
            print(info_text(d))
    if args.json:
        print(json.dumps({"stores": stores, "errors": failures}, indent=2, ensure_ascii=False))
    return status


def add(new: NewCommand) -> None:
    about = "describe stores, or every store under a directory"
    p = new("info", about)
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    storage_option_arg(p)
    p.set_defaults(run=run)
