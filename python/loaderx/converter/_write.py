"""Writing: one store per column inside an unpublished root, the stores'
attributes and reports, and publishing the root."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import _native, errors
from .. import progress as _progress
from .._schema import MAX_DATA_SHARDS, check_int
from ..errors import InvalidArgumentError, StoreExistsError
from ..utils import codec_advice
from ..zrecord import Dense, DenseWriter, Ragged, RaggedBatch, RaggedWriter
from ..zrecord import open as open_store
from ._arrow import batches, field_types, is_string, one_chunk, require_pyarrow
from ._dictionary import train_dictionaries
from ._hub import HUB_SOURCES
from ._inputs import (
    Split,
    check_codec_option,
    check_extra_attrs,
    is_table,
    names_option,
    plan_splits,
    splits_of,
)
from ._plan import Plan
from ._records import BATCH_ROWS, nbytes, records_of
from ._report import CodecAdviceWarning, ColumnReport, Conversion, Layout

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa
    from datasets import (  # pyright: ignore[reportMissingTypeStubs]
        Dataset,
        DatasetDict,
    )

    from ..progress import ProgressArg


def _stored_bytes(path: str) -> int:
    """Bytes of a store's data files and dictionary, from its header."""
    with open_store(path) as reader:
        return sum(reader.data_file_sizes) + len(reader.dictionary or b"")


def _advice(report: ColumnReport) -> str | None:
    """What to change when a codec did not make the store smaller."""
    advice = codec_advice(report.codec, report.records, report.raw_bytes, report.stored_bytes)
    if advice is None:
        return None
    name = report.column if report.split is None else f"{report.split}/{report.column}"
    mean = report.raw_bytes / max(report.records, 1)
    return (
        f"{report.codec} stored column {name!r} in {report.stored_bytes:,} bytes for "
        f"{report.raw_bytes:,} raw ({mean:,.0f} bytes per record): {advice.reason}"
    )


def _write_column(
    ds: Dataset,
    plan: Plan,
    root: str,
    data_shards: int,
    attrs: dict[str, Any],
    name: str,
    progress: ProgressArg,
) -> ColumnReport:
    """Writes and closes the store of one column, reporting rows as they are
    appended; the writer is discarded on any error."""
    writer: DenseWriter | RaggedWriter | None = None
    rows = raw = 0
    column = ds.select_columns([plan.column])  # pyright: ignore[reportUnknownMemberType]
    try:
        with _progress.task(name, total=len(ds), unit="rows", progress=progress) as task:
            for table in batches(column, BATCH_ROWS):
                for arr in one_chunk(table, plan.column):
                    for n, records in records_of(arr, plan, rows):
                        if writer is None:
                            writer = _create(plan, root, data_shards, attrs)
                        if isinstance(writer, DenseWriter):
                            writer.append(cast("npt.NDArray[np.generic]", records))
                        else:
                            writer.append(cast(RaggedBatch, records))
                        size = nbytes(records)
                        rows += n
                        raw += size
                        task.advance(n, nbytes=size)
        if writer is None or rows != len(ds):
            raise errors.InternalError(f"{name}: {rows} records written for {len(ds)} rows")
        writer.close()
    except BaseException:
        if writer is not None and not writer.closed:
            writer.abort()
        raise
    path = os.path.join(root, plan.column)
    assert plan.dtype is not None
    shape: tuple[int | None, ...] = (
        cast("tuple[int, ...]", plan.shape) if plan.kind == "dense" else (None,) * plan.ndim
    )
    return ColumnReport(
        split=None,
        column=plan.column,
        path=path,
        kind=plan.kind,
        dtype=plan.dtype,
        shape=shape,
        codec=plan.codec,
        records=rows,
        raw_bytes=raw,
        stored_bytes=0,  # read from the store once it is published
        dict_bytes=len(plan.dictionary or b""),
    )


def _source(ds: Dataset, from_table: bool) -> dict[str, Any]:
    """Where a dataset's rows came from, as far as datasets (or huggingface())
    recorded it."""
    if from_table:
        return {"kind": "pyarrow.Table"}
    info = ds.info
    files = cast("list[dict[str, str]]", ds.cache_files)  # pyright: ignore[reportUnknownMemberType]
    source: dict[str, Any] = {
        "kind": "datasets.Dataset",
        "dataset_name": info.dataset_name,
        "config_name": info.config_name,
        "split": None if ds.split is None else str(ds.split),
        # datasets' fingerprint of the dataset's content and transforms; it has no
        # public accessor.
        "fingerprint": getattr(ds, "_fingerprint", None),
        "cache_files": [f["filename"] for f in files],
    }
    source.update(HUB_SOURCES.get(ds, {}))
    return source


def _attrs(split: Split, plan: Plan, t: pa.DataType, extra: Mapping[str, Any]) -> dict[str, Any]:
    """A store's attributes: the converter's record of its source and column,
    then the caller's."""
    out: dict[str, Any] = {
        "converter": "loaderx.converter.convert",
        "column": plan.column,
        "split": split.name,
        "feature": plan.feature,
        "arrow_type": str(t),
        "source": _source(split.ds, split.from_table),
    }
    if plan.class_names is not None:
        out["class_names"] = list(plan.class_names)
    if plan.cast_from is not None:
        out["cast_from"] = str(plan.cast_from)
    if plan.source in ("image", "audio"):
        out["decode"] = plan.kind
    elif plan.source == "bytes" and is_string(t):
        out["utf8"] = True
    out.update(extra)
    return out


def _create(
    plan: Plan, root: str, data_shards: int, attrs: dict[str, Any]
) -> DenseWriter | RaggedWriter:
    """The column's writer, created once its dtype and shape are known."""
    path = os.path.join(root, plan.column)
    assert plan.dtype is not None
    if plan.source == "audio":
        attrs = {**attrs, "sampling_rate": plan.sampling_rate}
    if plan.kind == "dense":
        assert plan.shape is not None
        return Dense.create(
            path,
            plan.dtype,
            plan.shape,
            codec=plan.codec,
            data_shards=data_shards,
            dict_bytes=plan.dictionary,
            attrs=attrs,
        )
    return Ragged.create(
        path,
        plan.dtype,
        ndim=plan.ndim,
        codec=plan.codec,
        data_shards=data_shards,
        dict_bytes=plan.dictionary,
        attrs=attrs,
    )


def convert(
    dataset: Dataset | DatasetDict | Mapping[str, Dataset] | pa.Table,
    path: str | os.PathLike[str],
    *,
    codec: str | Mapping[str, str],
    data_shards: int = 4,
    progress: ProgressArg = True,
    decode: Mapping[str, Layout] | None = None,
    dense: Iterable[str] | None = None,
    utf8: Iterable[str] | None = None,
    dict_bytes: Mapping[str, bytes] | None = None,
    attrs: Mapping[str, Any] | None = None,
    dtypes: Mapping[str, npt.DTypeLike] | None = None,
) -> Conversion:
    """Writes `dataset` as one store per column (per split) under `path`, which
    must not exist, and returns what it wrote (a ``Conversion``, whose
    ``os.fspath`` is `path`). The root is published atomically once every store is
    complete.

    `dataset` is a ``datasets.Dataset``, a ``DatasetDict`` (or dict of split name to
    ``Dataset``) or a ``pyarrow.Table``. ``codec`` is ``"raw"``, ``"zstd"`` or
    ``"zstd_dict"``, or a dict giving one per column. ``zstd_dict`` trains one
    dictionary per column from evenly spread records of its largest split, unless
    ``dict_bytes={column: dictionary}`` gives it.

    Column options, each naming columns: ``decode={column: "dense" | "ragged"}``
    decodes an ``Image`` column's files with Pillow into one fixed-shape Dense store
    or native-resolution Ragged records; ``dense=[column]`` stores lists of
    undeclared length as Dense when every record has one shape; ``utf8=[column]``
    stores strings as their UTF-8 bytes (Ragged uint8); ``dtypes={column: dtype}``
    stores a column of numbers in another dtype (integers must keep their values
    exactly; floats may be narrowed, e.g. float64 to float32). Nothing else is
    converted.

    ``progress`` reports the rows of each store as it is written (a task named
    ``convert COLUMN`` or ``convert SPLIT/COLUMN``): ``True`` shows a bar per
    column when stderr is a terminal, ``False`` nothing, and a callable receives
    each ``loaderx.progress.ProgressEvent``.

    Each store's attributes (``reader.attrs``) record its source (dataset name,
    configuration, split, fingerprint, cache files; Hub repository, revision and
    commit for a dataset ``huggingface()`` returned) and its column (feature,
    Arrow type, ClassLabel names); ``attrs`` adds keys of the caller's to every
    store.

    Every column that cannot be stored, and every option that does not fit its
    column, is reported in one ``InvalidArgumentError`` before anything is
    written. A ``CodecAdviceWarning`` (also in ``Conversion.advice``) says when a
    codec did not make a store smaller and what to use instead.

    Publishing is all or nothing, as for one store: ``PublishedNotDurableError``
    means the root WAS published (only syncing its parent directory failed); any
    other error means nothing was, and the build directory is gone."""
    require_pyarrow()
    check_codec_option(codec)
    data_shards = check_int(data_shards, "data_shards", 1, MAX_DATA_SHARDS)
    splits = splits_of(dataset)
    from_table = is_table(dataset)
    extra = check_extra_attrs(attrs)
    dest = os.path.abspath(path)
    if os.path.lexists(dest):
        raise StoreExistsError(f"{dest}: already exists; convert writes a new path")
    decode = dict(decode or {})
    for c, layout in decode.items():
        if layout not in ("dense", "ragged"):
            raise InvalidArgumentError(
                f"decode={{{c!r}: {layout!r}}}: the layout is 'dense' or 'ragged'"
            )
    plans = plan_splits(
        splits,
        {id(ds) for ds in splits.values()} if from_table else set(),
        codec,
        decode,
        names_option(dense, "dense"),
        names_option(utf8, "utf8"),
        dict(dict_bytes or {}),
        dict(dtypes or {}),
    )
    train_dictionaries(plans)
    build = _native.BuildDir(dest)
    tmp = os.fspath(build.path)
    reports: list[ColumnReport] = []
    try:
        for split in plans:
            root = tmp if split.name is None else os.path.join(tmp, split.name)
            if split.name is not None:
                os.makedirs(root)
            for plan in split.plans:
                label = plan.column if split.name is None else f"{split.name}/{plan.column}"
                t = field_types(split.ds.data.schema)[plan.column]
                report = _write_column(
                    split.ds,
                    plan,
                    root,
                    data_shards,
                    _attrs(split, plan, t, extra),
                    f"convert {label}",
                    progress,
                )
                reports.append(dataclasses.replace(report, split=split.name))
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
    final: list[ColumnReport] = []
    for r in reports:
        moved = os.path.join(dest, os.path.relpath(r.path, tmp))
        r = dataclasses.replace(r, path=moved, stored_bytes=_stored_bytes(moved))
        advice = _advice(r)
        if advice is not None:
            r = dataclasses.replace(r, advice=advice)
            warnings.warn(advice, CodecAdviceWarning, stacklevel=2)
        final.append(r)
    return Conversion(dest, tuple(final))
