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

import importlib
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, cast

import numpy as np

from . import _native, errors
from ._schema import check_int
from .errors import InvalidArgumentError, StoreExistsError
from .zrecord import Dense, DenseWriter, Ragged, RaggedBatch, RaggedWriter

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa
    from datasets import (  # pyright: ignore[reportMissingTypeStubs]
        Dataset,
        DatasetDict,
    )
    from typing_extensions import Self, TypeIs

__all__ = ["convert", "huggingface"]

# Rows per Arrow batch read from the dataset; halved while a Ragged batch's
# elements overflow int32 cu_seqlens.
BATCH_ROWS = 4096
_UNDECODED = ("Image", "Audio", "Video", "Pdf")


@dataclass(frozen=True)
class _Plan:
    """How one column is stored."""

    column: str
    kind: Literal["dense", "ragged"]
    dtype: np.dtype
    item_shape: tuple[int, ...] = ()  # Dense
    ndim: int = 1  # Ragged
    layout: Literal["list", "binary", "struct"] = "list"  # Ragged


# Arrow arrays as convert reads them. Which kind an array is follows from its
# Arrow type, which convert checks before it narrows to one of these.


class _Array(Protocol):
    @property
    def type(self) -> pa.DataType: ...
    @property
    def null_count(self) -> int: ...
    @property
    def offset(self) -> int: ...
    def __len__(self) -> int: ...
    def slice(self, offset: int = 0, length: int | None = None) -> Self: ...
    def buffers(self) -> list[pa.Buffer | None]: ...
    def to_numpy(self, zero_copy_only: bool = True) -> npt.NDArray[np.generic]: ...


class _ListArray(_Array, Protocol):
    """A list, large list or fixed-size list array."""

    @property
    def offsets(self) -> _Array: ...
    def flatten(self) -> _Array: ...
    def value_lengths(self) -> _Array: ...


class _StructArray(_Array, Protocol):
    @property
    def type(self) -> pa.StructType: ...
    def flatten(self) -> list[_Array]: ...


class _ExtensionArray(_Array, Protocol):
    """datasets' ArrayND columns, whose storage is nested lists."""

    @property
    def storage(self) -> _Array: ...


def _pa() -> None:
    """Imports pyarrow, or says which extra provides it."""
    try:
        importlib.import_module("pyarrow.compute")  # and with it pyarrow
    except ImportError as e:  # pragma: no cover - the converter extra has it
        raise ImportError(
            "convert needs pyarrow: run `pip install -e '.[converter]'` in the loaderx checkout"
        ) from e


def _is_number(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)


def _number(t: pa.DataType, column: str) -> np.dtype:
    if _is_number(t):
        return np.dtype(t.to_pandas_dtype())
    raise InvalidArgumentError(
        f"column {column!r}: {t} values cannot be stored; convert needs numbers "
        "(map strings to ids, or encode them to bytes, with Dataset.map first)"
    )


def _array_feature(column: str, t: pa.ExtensionType) -> _Plan:
    """datasets' Array2D..Array5D: an extension type with a declared shape."""
    shape = cast("tuple[int | None, ...] | None", getattr(t, "shape", None))
    vt = cast("str | pa.DataType | None", getattr(t, "value_type", None))
    if shape is None or vt is None or any(d is None for d in shape):
        raise InvalidArgumentError(f"column {column!r}: {t} has no fixed shape; it cannot be Dense")
    dtype = np.dtype(vt) if isinstance(vt, str) else _number(vt, column)
    if dtype.kind not in "biuf":
        raise InvalidArgumentError(f"column {column!r}: {dtype} values cannot be stored")
    return _Plan(column, "dense", dtype, tuple(int(cast(int, d)) for d in shape))


def _field_types(fields: pa.StructType | pa.Schema) -> dict[str, pa.DataType]:
    """The type of each field of a struct type or schema, by name, in order."""
    # pyarrow's stubs leave the type of a field's type open.
    return {f.name: f.type for f in cast("Iterable[pa.Field[pa.DataType]]", fields)}


def _value_type(t: pa.DataType) -> pa.DataType:
    """The element type of a list or large list type."""
    return cast("pa.ListType[pa.DataType]", t).value_type


def _plan(column: str, t: pa.DataType, feature: object) -> _Plan:
    import pyarrow as pa

    name = type(feature).__name__
    if name in _UNDECODED:
        raise InvalidArgumentError(
            f"column {column!r} has feature type {name}; decode it to arrays (or keep the "
            "encoded bytes as a binary column) with Dataset.map before converting"
        )
    if isinstance(t, pa.ExtensionType):
        return _array_feature(column, t)
    if pa.types.is_null(t):
        raise InvalidArgumentError(f"column {column!r} holds only nulls")
    shape: list[int] = []
    inner = t
    while pa.types.is_fixed_size_list(inner):
        shape.append(inner.list_size)
        inner = inner.value_type
    if shape or _is_number(inner):
        if not _is_number(inner):
            raise InvalidArgumentError(f"column {column!r}: {t} nests {inner} in a fixed-size list")
        return _Plan(column, "dense", _number(inner, column), tuple(shape))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _Plan(column, "ragged", np.dtype(np.uint8), layout="binary")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if pa.types.is_nested(_value_type(t)):
            raise InvalidArgumentError(
                f"column {column!r}: {t} nests dynamic lists; store a multidimensional "
                "record as a struct {values: list<number>, shape: fixed_size_list<uint64, n>}"
            )
        return _Plan(column, "ragged", _number(_value_type(t), column))
    if pa.types.is_struct(t) and sorted(_field_types(t)) == ["shape", "values"]:
        fields = _field_types(t)
        values, shape_t = fields["values"], fields["shape"]
        is_list = pa.types.is_list(values) or pa.types.is_large_list(values)
        if (
            is_list
            and _is_number(_value_type(values))
            and pa.types.is_fixed_size_list(shape_t)
            and pa.types.is_uint64(shape_t.value_type)
            and shape_t.list_size >= 1
        ):
            dtype = _number(_value_type(values), column)
            return _Plan(column, "ragged", dtype, ndim=shape_t.list_size, layout="struct")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        _number(t, column)  # raises with the advice for strings
    raise InvalidArgumentError(
        f"column {column!r}: {t} cannot be stored as Dense or Ragged records"
    )


def _no_nulls(arr: _Array, plan: _Plan) -> None:
    if arr.null_count:
        raise InvalidArgumentError(f"column {plan.column!r} holds {arr.null_count} null value(s)")


def _flat(arr: _Array, plan: _Plan) -> _Array:
    """The leaf values of a (nested) fixed-size list array, honouring slices."""
    import pyarrow as pa

    while pa.types.is_fixed_size_list(arr.type):
        _no_nulls(arr, plan)
        arr = cast("_ListArray", arr).flatten()
    return arr


def _dense_chunk(arr: _Array, plan: _Plan) -> npt.NDArray[np.generic]:
    import pyarrow as pa

    n = len(arr)
    _no_nulls(arr, plan)
    if isinstance(arr.type, pa.ExtensionType):
        # ArrayND storage is lists of lists: every record must have the full shape.
        arr = cast("_ExtensionArray", arr).storage
        for size in plan.item_shape:
            _no_nulls(arr, plan)
            lists = cast("_ListArray", arr)
            lengths = lists.value_lengths().to_numpy(zero_copy_only=False)
            if (lengths != size).any():
                raise InvalidArgumentError(
                    f"column {plan.column!r}: a record is not {plan.item_shape}"
                )
            arr = lists.flatten()
    values = _flat(arr, plan)
    _no_nulls(values, plan)
    out = values.to_numpy(zero_copy_only=False).astype(plan.dtype, copy=False)
    return np.ascontiguousarray(out.reshape((n, *plan.item_shape)))


def _fields(arr: _Array) -> dict[str, _Array]:
    """A struct array's children, sliced like the struct."""
    struct = cast("_StructArray", arr)
    return dict(zip(_field_types(struct.type), struct.flatten(), strict=True))


def _list_values(
    arr: _Array, plan: _Plan
) -> tuple[npt.NDArray[np.int32] | npt.NDArray[np.int64], npt.NDArray[np.generic]]:
    """Offsets (not rebased) and the flattened values of a list array."""
    lists = cast("_ListArray", arr)
    flat = lists.flatten()
    _no_nulls(flat, plan)
    offsets = cast("npt.NDArray[np.int32] | npt.NDArray[np.int64]", lists.offsets.to_numpy())
    return offsets, flat.to_numpy(zero_copy_only=False)


def _ragged_chunk(arr: _Array, plan: _Plan) -> RaggedBatch:
    import pyarrow as pa

    _no_nulls(arr, plan)
    n = len(arr)
    if plan.layout == "binary":
        # pyarrow Buffers export the buffer protocol, which their stubs do not declare.
        bufs = cast("list[bytes | None]", arr.buffers())
        wide = pa.types.is_large_binary(arr.type)
        offsets = np.frombuffer(cast(bytes, bufs[1]), np.int64 if wide else np.int32)[
            arr.offset : arr.offset + n + 1
        ]
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
        values: npt.NDArray[np.generic] = data[offsets[0] : offsets[-1]]
        shapes = np.diff(offsets).reshape(n, 1)
    elif plan.layout == "list":
        offsets, values = _list_values(arr, plan)
        shapes = np.diff(offsets).reshape(n, 1)
    else:
        fields = _fields(arr)
        _no_nulls(fields["values"], plan)
        offsets, values = _list_values(fields["values"], plan)
        shapes = _flat(fields["shape"], plan).to_numpy(zero_copy_only=False)
        shapes = shapes.reshape(n, plan.ndim)
    return RaggedBatch(
        np.ascontiguousarray(values, plan.dtype),
        (offsets - offsets[0]).astype(np.int32),
        np.ascontiguousarray(shapes, np.uint64),
    )


def _elements(arr: _Array, plan: _Plan) -> int:
    """How many values a Ragged chunk packs."""
    import pyarrow.compute as pc

    if plan.layout == "binary":
        binary = cast("pa.BinaryArray | pa.LargeBinaryArray", arr)
        return int(pc.sum(pc.binary_length(binary)).as_py() or 0)
    if plan.layout == "struct":
        arr = _fields(arr)["values"]
    return len(cast("_ListArray", arr).flatten())


def _batches(dataset: Dataset, rows: int) -> Iterator[pa.Table]:
    """The dataset's rows as Arrow tables of at most `rows` rows, in order."""
    # datasets leaves the type of format arguments open; its "arrow" format yields
    # pyarrow Tables.
    arrow = dataset.with_format("arrow")  # pyright: ignore[reportUnknownMemberType]
    yield from cast("Iterator[pa.Table]", arrow.iter(batch_size=rows))


def _is_dict(dataset: Dataset | DatasetDict) -> TypeIs[DatasetDict]:
    return isinstance(dataset, Mapping)


def _check_input(dataset: object) -> None:
    kind = type(dataset).__name__
    if kind in ("IterableDataset", "IterableDatasetDict"):
        raise TypeError(
            f"convert takes a Dataset or DatasetDict, not an {kind}: materialize it first "
            "(for example with Dataset.from_generator)"
        )
    splits = (
        cast("Mapping[object, object]", dataset).values()
        if isinstance(dataset, Mapping)
        else [dataset]
    )
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


def _check_name(name: object, what: str) -> str:
    """`name`, which becomes a directory name, once checked that it can be one."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\0" in name
        or (os.altsep is not None and os.altsep in name)
    ):
        raise InvalidArgumentError(f"{what} {name!r} cannot name a directory of the output")
    return name


def _convert_split(
    ds: Dataset, root: str, label: str, codec: str, data_shards: int, say: _Progress
) -> None:
    schema = ds.data.schema
    if len(ds.column_names) == 0:
        raise InvalidArgumentError("the dataset has no columns")
    if len(ds) == 0:
        raise InvalidArgumentError("the dataset has no rows; there is nothing to convert")
    for c in ds.column_names:
        _check_name(c, "column")
    types = _field_types(schema)
    # Features is an untyped dict of the column's feature objects.
    features = cast("Mapping[str, object]", ds.features)
    plans = [_plan(c, types[c], features.get(c)) for c in ds.column_names]
    writers: dict[str, DenseWriter | RaggedWriter] = {}
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
                w = writers[p.column]
                for arr in col.chunks:
                    if isinstance(w, DenseWriter):
                        w.append(_dense_chunk(arr, p))
                    else:
                        for piece in _int32_pieces(arr, p):
                            w.append(_ragged_chunk(piece, p))
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


def _int32_pieces(arr: _Array, plan: _Plan) -> Iterator[_Array]:
    """`arr` in slices whose element count fits int32 cu_seqlens."""
    if len(arr) > 1 and _elements(arr, plan) >= 2**31:
        half = len(arr) // 2
        yield from _int32_pieces(arr.slice(0, half), plan)
        yield from _int32_pieces(arr.slice(half), plan)
    else:
        yield arr


def convert(
    dataset: Dataset | DatasetDict,
    path: str | os.PathLike[str],
    *,
    codec: str,
    data_shards: int = 4,
    progress: bool = True,
) -> str:
    """Writes `dataset` (a ``Dataset`` or ``DatasetDict``) as one store per column
    (per split) under `path`, which must not exist, and returns `path`. The root is
    published atomically when every store is complete. ``codec`` is ``"raw"`` or
    ``"zstd"``; ``progress`` prints a line per batch to stderr.

    Publishing is all or nothing, as for one store: ``PublishedNotDurableError``
    means the root WAS published (only syncing its parent directory failed); any
    other error means nothing was, and the build directory is gone."""
    _pa()
    dest = os.path.abspath(path)
    if os.path.lexists(dest):
        raise StoreExistsError(f"{dest}: already exists; convert writes a new path")
    if codec not in ("raw", "zstd"):
        if codec == "zstd_dict":
            raise InvalidArgumentError(
                "convert writes raw or zstd; zstd_dict needs a dictionary per column, "
                "trained from the converted store (train_dict) and applied by re-encoding"
            )
        raise InvalidArgumentError(f"codec must be 'raw' or 'zstd', got {codec!r}")
    data_shards = check_int(data_shards, "data_shards", 1)
    _check_input(dataset)
    say = _Progress(progress)
    build = _native.BuildDir(dest)
    tmp = os.fspath(build.path)
    try:
        if _is_dict(dataset):
            if not dataset:
                raise InvalidArgumentError("the DatasetDict has no splits")
            splits = {_check_name(split, "split"): ds for split, ds in dataset.items()}
            for split, ds in splits.items():
                os.makedirs(os.path.join(tmp, split))
                root, label = os.path.join(tmp, split), os.path.join(dest, split)
                _convert_split(ds, root, label, codec, data_shards, say)
        else:
            _convert_split(dataset, tmp, dest, codec, data_shards, say)
    except errors.PublishedNotDurableError as e:
        # A column store "published" inside the unpublished root: its directory
        # entry is not durable, so neither would the root be. Nothing is published.
        build.discard()
        raise errors.StorageError(
            e.errno,
            f"{dest}: nothing was published: syncing the directory of a column failed: "
            f"{os.strerror(e.errno or 0)}",
        ) from e
    except BaseException:
        build.discard()
        raise
    build.publish()
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
) -> DatasetDict:
    """Downloads the dataset repository `repo` at `revision` (default: the main
    branch), resolved first to its immutable commit, and returns its
    ``DatasetDict`` (configuration `config`). `endpoint` selects a mirror or a
    private Hub and `token` authorizes private or gated repositories, without
    touching the process environment."""
    try:
        # Both type most of their API; the rest (snapshot_download's user_agent and
        # tqdm_class, load_dataset's storage_options) is what pyright calls unknown.
        import datasets  # pyright: ignore[reportMissingTypeStubs]
        from huggingface_hub import (
            HfApi,
            snapshot_download,  # pyright: ignore[reportUnknownVariableType]
        )
    except ImportError as e:
        raise ImportError(
            "huggingface needs the converter extra: run `pip install -e '.[converter]'` in the "
            "loaderx checkout"
        ) from e
    info = HfApi(endpoint=endpoint, token=token).dataset_info(repo, revision=revision)
    local = snapshot_download(
        repo,
        repo_type="dataset",
        revision=info.sha,
        endpoint=endpoint,
        token=token,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
    )
    return datasets.load_dataset(local, config)  # pyright: ignore[reportUnknownMemberType]
