"""Offline conversion of Hugging Face datasets into Zrecord stores.

``convert(dataset, path, codec=...)`` writes every column of an Arrow-backed
``Dataset`` (or every split of a ``DatasetDict``) as its own store under one root
and publishes the root only when every column is complete and all columns of a
split hold the same number of records::

    path/<column>/              for a Dataset
    path/<split>/<column>/      for a DatasetDict

It reads Arrow record batches, never decoded Python records:

* numeric and boolean scalars become Dense stores with ``item_shape=()``;
* fixed-size lists (nested to any depth, or the ``ArrayND`` features) of numbers
  become Dense stores of that shape;
* variable-length lists of numbers, and binary values (as uint8), become
  one-dimensional Ragged stores;
* a struct ``{values: list<number>, shape: fixed_size_list<uint64, ndim>}`` becomes
  a Ragged store of that ndim.

Anything else fails before anything is written, naming the column: nulls,
strings, lists of lists of varying length, structs of other shapes, and Image,
Audio or Video features (map them to arrays or bytes with ``Dataset.map`` first).
``IterableDataset`` is refused: materialize it first.

``huggingface(repo, ...)`` downloads a dataset repository at an immutable
revision and returns its ``DatasetDict``. Both need the ``converter`` extra
(``datasets`` and ``pyarrow``): ``bash scripts/test.sh`` installs it into ``.venv``,
or run ``.venv/bin/pip install -e '.[converter]'`` in the loaderx checkout. Install
from the checkout, not by name: the ``loaderx`` package on PyPI is not this code.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _native
from ._schema import check_int
from .zrecord import Dense, Ragged, RaggedBatch

__all__ = ["convert", "huggingface"]

# Rows per Arrow batch read from the dataset; halved while a Ragged batch's
# elements overflow int32 cu_seqlens.
BATCH_ROWS = 4096
_UNDECODED = ("Image", "Audio", "Video", "Pdf")


@dataclass(frozen=True)
class _Plan:
    """How one column is stored."""

    column: str
    kind: str  # "dense" or "ragged"
    dtype: np.dtype
    item_shape: tuple[int, ...] = ()  # Dense
    ndim: int = 1  # Ragged
    layout: str = "list"  # Ragged: "list", "binary" or "struct"


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401 - makes pa.compute available
    except ImportError as e:  # pragma: no cover - the converter extra has it
        raise ImportError("convert needs pyarrow: pip install 'loaderx[converter]'") from e
    return pa


def _is_number(pa, t: Any) -> bool:
    return pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)


def _number(pa, t: Any, column: str) -> np.dtype:
    if _is_number(pa, t):
        return np.dtype(t.to_pandas_dtype())
    raise ValueError(
        f"column {column!r}: {t} values cannot be stored; convert needs numbers "
        "(map strings to ids, or encode them to bytes, with Dataset.map first)"
    )


def _array_feature(pa, column: str, t: Any) -> _Plan:
    """datasets' Array2D..Array5D: an extension type with a declared shape."""
    shape, vt = getattr(t, "shape", None), getattr(t, "value_type", None)
    if shape is None or vt is None or any(d is None for d in shape):
        raise ValueError(f"column {column!r}: {t} has no fixed shape; it cannot be Dense")
    dtype = np.dtype(vt) if isinstance(vt, str) else _number(pa, vt, column)
    if dtype.kind not in "biuf":
        raise ValueError(f"column {column!r}: {dtype} values cannot be stored")
    return _Plan(column, "dense", dtype, tuple(int(d) for d in shape))


def _plan(pa, column: str, t: Any, feature: Any) -> _Plan:
    name = type(feature).__name__
    if name in _UNDECODED:
        raise ValueError(
            f"column {column!r} has feature type {name}; decode it to arrays (or keep the "
            "encoded bytes as a binary column) with Dataset.map before converting"
        )
    if isinstance(t, pa.ExtensionType):
        return _array_feature(pa, column, t)
    if pa.types.is_null(t):
        raise ValueError(f"column {column!r} holds only nulls")
    shape, inner = [], t
    while pa.types.is_fixed_size_list(inner):
        shape.append(inner.list_size)
        inner = inner.value_type
    if shape or _is_number(pa, inner):
        if not _is_number(pa, inner):
            raise ValueError(f"column {column!r}: {t} nests {inner} in a fixed-size list")
        return _Plan(column, "dense", _number(pa, inner, column), tuple(shape))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _Plan(column, "ragged", np.dtype(np.uint8), layout="binary")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if pa.types.is_nested(t.value_type):
            raise ValueError(
                f"column {column!r}: {t} nests dynamic lists; store a multidimensional "
                "record as a struct {values: list<number>, shape: fixed_size_list<uint64, n>}"
            )
        return _Plan(column, "ragged", _number(pa, t.value_type, column))
    if pa.types.is_struct(t) and sorted(f.name for f in t) == ["shape", "values"]:
        values, shape_t = t.field("values").type, t.field("shape").type
        is_list = pa.types.is_list(values) or pa.types.is_large_list(values)
        if (
            is_list
            and _is_number(pa, values.value_type)
            and pa.types.is_fixed_size_list(shape_t)
            and pa.types.is_uint64(shape_t.value_type)
            and shape_t.list_size >= 1
        ):
            dtype = _number(pa, values.value_type, column)
            return _Plan(column, "ragged", dtype, ndim=shape_t.list_size, layout="struct")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        _number(pa, t, column)  # raises with the advice for strings
    raise ValueError(f"column {column!r}: {t} cannot be stored as Dense or Ragged records")


def _no_nulls(arr: Any, plan: _Plan) -> None:
    if arr.null_count:
        raise ValueError(f"column {plan.column!r} holds {arr.null_count} null value(s)")


def _flat(pa, arr: Any, plan: _Plan) -> Any:
    """The leaf values of a (nested) fixed-size list array, honouring slices."""
    while pa.types.is_fixed_size_list(arr.type):
        _no_nulls(arr, plan)
        arr = arr.flatten()
    return arr


def _dense_chunk(pa, arr: Any, plan: _Plan) -> np.ndarray:
    n = len(arr)
    _no_nulls(arr, plan)
    if isinstance(arr.type, pa.ExtensionType):
        # ArrayND storage is lists of lists: every record must have the full shape.
        arr = arr.storage
        for size in plan.item_shape:
            _no_nulls(arr, plan)
            lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
            if (lengths != size).any():
                raise ValueError(f"column {plan.column!r}: a record is not {plan.item_shape}")
            arr = arr.flatten()
    values = _flat(pa, arr, plan)
    _no_nulls(values, plan)
    out = values.to_numpy(zero_copy_only=False).astype(plan.dtype, copy=False)
    return np.ascontiguousarray(out.reshape((n, *plan.item_shape)))


def _fields(arr: Any) -> dict[str, Any]:
    """A struct array's children, sliced like the struct."""
    return dict(zip([f.name for f in arr.type], arr.flatten(), strict=True))


def _list_values(arr: Any, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (not rebased) and the flattened values of a list array."""
    flat = arr.flatten()
    _no_nulls(flat, plan)
    return arr.offsets.to_numpy(), flat.to_numpy(zero_copy_only=False)


def _ragged_chunk(pa, arr: Any, plan: _Plan) -> RaggedBatch:
    _no_nulls(arr, plan)
    n = len(arr)
    if plan.layout == "binary":
        bufs = arr.buffers()
        wide = pa.types.is_large_binary(arr.type)
        offsets = np.frombuffer(bufs[1], np.int64 if wide else np.int32)[
            arr.offset : arr.offset + n + 1
        ]
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
        values = data[offsets[0] : offsets[-1]]
        shapes = np.diff(offsets).reshape(n, 1)
    elif plan.layout == "list":
        offsets, values = _list_values(arr, plan)
        shapes = np.diff(offsets).reshape(n, 1)
    else:
        fields = _fields(arr)
        _no_nulls(fields["values"], plan)
        offsets, values = _list_values(fields["values"], plan)
        shapes = _flat(pa, fields["shape"], plan).to_numpy(zero_copy_only=False)
        shapes = shapes.reshape(n, plan.ndim)
    return RaggedBatch(
        np.ascontiguousarray(values, plan.dtype),
        (offsets - offsets[0]).astype(np.int32),
        np.ascontiguousarray(shapes, np.uint64),
    )


def _elements(pa, arr: Any, plan: _Plan) -> int:
    """How many values a Ragged chunk packs."""
    if plan.layout == "binary":
        return int(pa.compute.sum(pa.compute.binary_length(arr)).as_py() or 0)
    if plan.layout == "struct":
        arr = _fields(arr)["values"]
    return len(arr.flatten())


def _batches(dataset: Any, rows: int) -> Iterator[Any]:
    """The dataset's rows as Arrow tables of at most `rows` rows, in order."""
    yield from dataset.with_format("arrow").iter(batch_size=rows)


def _is_dict(dataset: Any) -> bool:
    return isinstance(dataset, Mapping)


def _check_input(dataset: Any) -> None:
    kind = type(dataset).__name__
    if kind in ("IterableDataset", "IterableDatasetDict"):
        raise TypeError(
            f"convert takes a Dataset or DatasetDict, not an {kind}: materialize it first "
            "(for example with Dataset.from_generator)"
        )
    splits = dataset.values() if _is_dict(dataset) else [dataset]
    for d in splits:
        if not (hasattr(d, "features") and hasattr(d, "with_format") and hasattr(d, "data")):
            raise TypeError(
                f"convert takes a datasets.Dataset or DatasetDict, got {type(d).__name__}"
            )


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"loaderx.convert: {msg}", file=sys.stderr, flush=True)


def _check_name(name: Any, what: str) -> None:
    """A column or split name becomes a directory name: it must be one."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\0" in name
        or (os.altsep is not None and os.altsep in name)
    ):
        raise ValueError(f"{what} {name!r} cannot name a directory of the output")


def _convert_split(
    pa, ds: Any, root: str, label: str, codec: str, data_shards: int, say: _Progress
) -> None:
    schema = ds.data.schema
    if len(ds.column_names) == 0:
        raise ValueError("the dataset has no columns")
    if len(ds) == 0:
        raise ValueError("the dataset has no rows; there is nothing to convert")
    for c in ds.column_names:
        _check_name(c, "column")
    plans = [_plan(pa, c, schema.field(c).type, ds.features.get(c)) for c in ds.column_names]
    writers = {}
    try:
        for p in plans:
            path = os.path.join(root, p.column)
            if p.kind == "dense":
                writers[p.column] = Dense.create(
                    path, p.dtype, p.item_shape, codec=codec, data_shards=data_shards
                )
            else:
                writers[p.column] = Ragged.create(
                    path, p.dtype, ndim=p.ndim, codec=codec, data_shards=data_shards
                )
        done, start = 0, time.perf_counter()
        for table in _batches(ds, BATCH_ROWS):
            for p in plans:
                col = table.column(p.column)
                for arr in col.chunks:
                    if p.kind == "dense":
                        writers[p.column].append(_dense_chunk(pa, arr, p))
                    else:
                        for piece in _int32_pieces(pa, arr, p):
                            writers[p.column].append(_ragged_chunk(pa, piece, p))
            done += table.num_rows
            say(f"{label}: {done:,} / {len(ds):,} rows ({time.perf_counter() - start:.1f} s)")
        counts = {c: len(w) for c, w in writers.items()}
        if len(set(counts.values())) != 1:
            raise RuntimeError(f"{label}: columns disagree on the record count: {counts}")
        for w in writers.values():
            w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise


def _int32_pieces(pa, arr: Any, plan: _Plan) -> Iterator[Any]:
    """`arr` in slices whose element count fits int32 cu_seqlens."""
    if len(arr) > 1 and _elements(pa, arr, plan) >= 2**31:
        half = len(arr) // 2
        yield from _int32_pieces(pa, arr.slice(0, half), plan)
        yield from _int32_pieces(pa, arr.slice(half), plan)
    else:
        yield arr


def convert(
    dataset: Any,
    path: str | os.PathLike[str],
    *,
    codec: str,
    data_shards: int = 4,
    progress: bool = True,
) -> str:
    """Writes `dataset` (a ``Dataset`` or ``DatasetDict``) as one store per column
    (per split) under `path`, which must not exist, and returns `path`. The root is
    published atomically when every store is complete. ``codec`` is ``"raw"`` or
    ``"zstd"``; ``progress`` prints a line per batch to stderr."""
    pa = _pa()
    dest = os.path.abspath(os.fspath(path))
    if os.path.lexists(dest):
        raise FileExistsError(f"{dest}: already exists; convert writes a new path")
    if codec not in ("raw", "zstd"):
        if codec == "zstd_dict":
            raise ValueError(
                "convert writes raw or zstd; zstd_dict needs a dictionary per column, "
                "trained from the converted store (train_dict) and applied by re-encoding"
            )
        raise ValueError(f"codec must be 'raw' or 'zstd', got {codec!r}")
    data_shards = check_int(data_shards, "data_shards", 1)
    _check_input(dataset)
    say = _Progress(progress)
    tmp = os.fspath(_native.temp_sibling(dest))
    os.makedirs(tmp)
    try:
        if _is_dict(dataset):
            if not dataset:
                raise ValueError("the DatasetDict has no splits")
            for split in dataset:
                _check_name(split, "split")
            for split, ds in dataset.items():
                os.makedirs(os.path.join(tmp, split))
                root, label = os.path.join(tmp, split), os.path.join(dest, split)
                _convert_split(pa, ds, root, label, codec, data_shards, say)
        else:
            _convert_split(pa, dataset, tmp, dest, codec, data_shards, say)
        _native.publish_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"published {dest}")
    return dest


def huggingface(
    repo: str,
    *,
    config: str | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """Downloads the dataset repository `repo` at `revision` (default: the main
    branch), resolved first to its immutable commit, and returns its
    ``DatasetDict`` (configuration `config`). `endpoint` selects a mirror or a
    private Hub and `token` authorizes private or gated repositories, without
    touching the process environment."""
    try:
        import datasets
        from huggingface_hub import HfApi, snapshot_download
    except ImportError as e:
        raise ImportError(
            "huggingface needs the converter extra: pip install 'loaderx[converter]'"
        ) from e
    info = HfApi(endpoint=endpoint, token=token).dataset_info(repo, revision=revision)
    local = snapshot_download(
        repo,
        repo_type="dataset",
        revision=info.sha,
        endpoint=endpoint,
        token=token,
        cache_dir=cache_dir,
    )
    return datasets.load_dataset(local, config)
