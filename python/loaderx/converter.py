"""Offline conversion of Hugging Face datasets, Arrow tables and Parquet data into
Zrecord stores.

``convert(dataset, path, codec=...)`` writes every column of an Arrow-backed
``datasets.Dataset`` (or every split of a ``DatasetDict``, or a ``pyarrow.Table``)
as its own store under one root, and publishes the root only when every column is
complete and all columns of a split hold the same number of records::

    path/<column>/              for a Dataset or a Table
    path/<split>/<column>/      for a DatasetDict

It reads Arrow record batches, never decoded Python records. Which store a column
becomes follows from its feature (docs/converter.md has the table):

* numbers and booleans: Dense, ``item_shape=()``; ``ClassLabel``: its integers, with
  the class names in the store's attributes;
* lists whose every level has a declared length (``List(..., length=k)``,
  ``Array2D`` ... ``Array5D``): Dense of that shape;
* lists with a level of undeclared length, nested to any depth (what ``Dataset.map``
  makes of arrays): Ragged with one dimension per level, when every record is a
  regular array (boxes ``List(List(Value("float32"), length=4))`` are ``(n, 4)``
  records, n = 0 included); ``dense=[column]`` asks for Dense when every record has
  the same shape;
* binary values and the encoded files of ``Image``, ``Audio``, ``Video``, ``Pdf``...
  features (whatever ``decode`` says): one Ragged uint8 record per file;
  ``decode={column: "dense" | "ragged"}`` decodes an ``Image`` column with Pillow,
  or an ``Audio`` column with soundfile into ``(frames, channels)`` samples at
  the files' own rate and sample type;
* a struct ``{values: list<number>, shape: fixed_size_list<uint64, ndim>}``: Ragged
  of that ndim;
* strings: refused unless ``utf8=[column]`` asks for their UTF-8 bytes (Ragged uint8).

Everything else (nulls, other structs, lists of strings, dates...) is refused before
anything is written, every such column in one error that says what to do instead.
Nothing is converted silently: dtypes are the source's.

``huggingface(repo, ...)`` resolves a dataset repository to an immutable commit,
downloads it (or finds it in the local hub cache when offline) and returns its
``DatasetDict``. Both need the ``converter`` extra (``datasets`` and ``pyarrow``):
run ``.venv/bin/pip install -e '.[converter]'`` in the loaderx checkout. Install
from the checkout, not by name: the ``loaderx`` package on PyPI is not this code.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import math
import os
import sys
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, cast

import numpy as np

from . import _native, errors
from . import progress as _progress
from ._schema import CODECS, check_dtype, check_int
from .errors import (
    InvalidArgumentError,
    MissingDependencyError,
    StorageError,
    StoreExistsError,
)
from .utils import codec_advice
from .zrecord import Dense, DenseWriter, Ragged, RaggedBatch, RaggedWriter

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa
    from datasets import (  # pyright: ignore[reportMissingTypeStubs]
        Dataset,
        DatasetDict,
    )
    from typing_extensions import Self

    from .progress import ProgressArg

__all__ = [
    "CodecAdviceWarning",
    "ColumnReport",
    "Conversion",
    "convert",
    "huggingface",
    "load_source",
]

#: Rows per Arrow batch read from the dataset; a Ragged batch whose elements
#: overflow int32 cu_seqlens is split further.
BATCH_ROWS = 4096
#: Rows decoded at a time for ``decode=``: decoded pixels are much larger than
#: their files.
DECODE_ROWS = 64

# Features whose Arrow storage is {bytes, path}: one encoded file per row.
_FILE_FEATURES = ("Image", "Audio", "Video", "Pdf", "Nifti", "Mesh", "BioSequence", "BioStructure")

Layout: TypeAlias = Literal["dense", "ragged"]
Records: TypeAlias = "npt.NDArray[np.generic] | RaggedBatch"


class CodecAdviceWarning(UserWarning):
    """A column's codec did not make its store smaller; the message says what to use."""


@dataclass(frozen=True)
class ColumnReport:
    """One store ``convert`` wrote."""

    split: str | None
    column: str
    path: str
    kind: Layout
    dtype: np.dtype
    #: Dense: the item shape; Ragged: ``None`` for each dimension.
    shape: tuple[int | None, ...]
    codec: str
    records: int
    #: Bytes of the records as arrays (what ``raw`` stores).
    raw_bytes: int
    #: Bytes of the data files (and dictionary) on disk.
    stored_bytes: int
    #: Size of the zstd dictionary, for ``zstd_dict``.
    dict_bytes: int = 0
    #: What to change when the codec did not pay, else ``None``.
    advice: str | None = None


class Conversion(str):
    """What ``convert`` wrote: the published root's path, as a ``str`` (so it is
    used as a path is), carrying one report per store in ``columns``."""

    columns: tuple[ColumnReport, ...]

    def __new__(cls, path: str, columns: tuple[ColumnReport, ...]) -> Conversion:
        self = super().__new__(cls, path)
        self.columns = columns
        return self

    @property
    def path(self) -> str:
        """The root's path as a plain ``str``."""
        return str.__str__(self)

    @property
    def advice(self) -> tuple[str, ...]:
        return tuple(c.advice for c in self.columns if c.advice is not None)

    def summary(self) -> str:
        """One line per store (records, layout, raw and stored bytes), then advice."""
        lines = [f"{self.path}:"]
        for c in self.columns:
            name = c.column if c.split is None else f"{c.split}/{c.column}"
            shape = f"item_shape={c.shape}" if c.kind == "dense" else f"ndim={len(c.shape)}"
            ratio = c.stored_bytes / c.raw_bytes if c.raw_bytes else 1.0
            lines.append(
                f"  {name}: {c.records:,} records, {c.kind} {c.dtype} {shape}, {c.codec}: "
                f"{c.raw_bytes:,} raw bytes -> {c.stored_bytes:,} stored ({ratio:.2f}x)"
            )
        lines.extend(f"  advice: {a}" for a in self.advice)
        return "\n".join(lines)


# ---- Arrow arrays as convert reads them ----------------------------------------
# Which kind an array is follows from its Arrow type, which convert checks before
# it narrows to one of these.


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
    def to_pylist(self) -> list[object]: ...


class _ListArray(_Array, Protocol):
    """A list, large list or fixed-size list array."""

    @property
    def offsets(self) -> _Array: ...
    def flatten(self) -> _Array: ...


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
        raise MissingDependencyError(
            "convert needs pyarrow and datasets: run `pip install -e '.[converter]'` in "
            "the loaderx checkout",
            name="pyarrow",
        ) from e


def _is_number(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)


def _field_types(fields: pa.StructType | pa.Schema) -> dict[str, pa.DataType]:
    """The type of each field of a struct type or schema, by name, in order."""
    # pyarrow's stubs leave the type of a field's type open.
    return {f.name: f.type for f in cast("Iterable[pa.Field[pa.DataType]]", fields)}


def _value_type(t: pa.DataType) -> pa.DataType:
    """The element type of a list, large list or fixed-size list type."""
    return cast("pa.ListType[pa.DataType]", t).value_type


def _is_list(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_bytes(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _is_string(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


# ---- planning: which store each column becomes -----------------------------------


@dataclass
class _Plan:
    """How one column is stored. `dtype` and `shape` are None where the data
    decides them (decoded images, Dense from lists of undeclared length): the
    first batch does, and every later one must agree."""

    column: str
    kind: Layout
    # number: scalars; nested: lists (dims per level); struct: {values, shape};
    # bytes: binary or UTF-8 strings; file: {bytes, path} files; image: decoded.
    source: Literal["number", "nested", "struct", "bytes", "file", "image", "audio"]
    dtype: np.dtype | None
    # nested: the length each list level declares, or None; struct: ndim Nones.
    dims: tuple[int | None, ...] = ()
    feature: str = ""
    class_names: tuple[str, ...] | None = None
    image_mode: str | None = None
    # audio: the rate every file must have (the feature's, else the first file's).
    sampling_rate: int | None = None
    # Dense: the item shape, once known. Ragged: the record ndim, once known (0 before).
    shape: tuple[int, ...] | None = None
    ndim: int = 0
    codec: str = "raw"
    dictionary: bytes | None = None
    # The column's own dtype, when dtypes= asked for `dtype` instead.
    cast_from: np.dtype | None = None

    def __post_init__(self) -> None:
        if self.source in ("nested", "struct", "number"):
            if self.kind == "ragged":
                self.ndim = len(self.dims)
            elif all(d is not None for d in self.dims):
                self.shape = tuple(cast("tuple[int, ...]", self.dims))
        elif self.source in ("bytes", "file"):
            self.ndim = 1


class _Refused(Exception):
    """One column convert cannot store, and what to do instead."""


def _numpy_dtype(t: pa.DataType) -> np.dtype:
    return np.dtype(t.to_pandas_dtype())


def _leaf_advice(column: str, leaf: pa.DataType, utf8: bool) -> str:
    if _is_string(leaf):
        if utf8:
            return (
                "lists of strings have no byte layout; join or tokenize them with Dataset.map first"
            )
        return (
            f"string values; pass utf8=[{column!r}] to store their UTF-8 bytes as Ragged "
            "uint8 records, or map them to token ids with Dataset.map"
        )
    return (
        f"{leaf} values cannot be stored; convert needs numbers (map them to numbers "
        "with Dataset.map or Dataset.cast)"
    )


def _class_names(feature: object) -> tuple[str, ...] | None:
    """The class names of a ClassLabel feature, or of one inside lists."""
    while True:
        name = type(feature).__name__
        if name == "ClassLabel":
            return tuple(cast("list[str]", getattr(feature, "names", [])))
        if name in ("List", "LargeList", "Sequence"):
            feature = getattr(feature, "feature", None)
            continue
        return None


def _array_dims(t: pa.ExtensionType) -> tuple[tuple[int | None, ...], pa.DataType]:
    """The declared shape and the storage of datasets' Array2D..Array5D."""
    shape = cast("tuple[int | None, ...]", getattr(t, "shape", ()))
    return tuple(shape), t.storage_type


def _nested_dims(t: pa.DataType) -> tuple[tuple[int | None, ...], pa.DataType]:
    """The length of each list level (None when undeclared) and the leaf type."""
    import pyarrow as pa

    dims: list[int | None] = []
    if isinstance(t, pa.ExtensionType) and hasattr(t, "shape"):
        declared, storage = _array_dims(t)
        # The storage is one list level per declared dimension.
        _, leaf = _nested_dims(storage)
        return declared, leaf
    while _is_list(t):
        dims.append(t.list_size if pa.types.is_fixed_size_list(t) else None)
        t = _value_type(t)
    return tuple(dims), t


def _plan(
    column: str,
    t: pa.DataType,
    feature: object,
    *,
    decode: Layout | None,
    dense: bool,
    utf8: bool,
) -> _Plan:
    """The plan for one column, or _Refused saying why and what to do instead."""
    import pyarrow as pa

    fname = type(feature).__name__
    frepr = repr(feature) if feature is not None else str(t)
    if fname in _FILE_FEATURES:
        if decode is not None:
            if fname == "Audio":
                rate = cast("int | None", getattr(feature, "sampling_rate", None))
                return _Plan(column, decode, "audio", None, feature=frepr, sampling_rate=rate)
            if fname != "Image":
                raise _Refused(
                    f"decode applies to Image and Audio columns; {fname} files are stored "
                    f"as their encoded bytes (leave {column!r} out of decode=), or map them "
                    "to arrays with Dataset.map"
                )
            mode = cast("str | None", getattr(feature, "mode", None))
            return _Plan(column, decode, "image", None, feature=frepr, image_mode=mode)
        return _Plan(column, "ragged", "file", np.dtype(np.uint8), (None,), frepr)
    if decode is not None:
        raise _Refused(f"decode= applies to Image and Audio columns, and {column!r} is {frepr}")
    if fname == "Json" or (isinstance(t, pa.ExtensionType) and not hasattr(t, "shape")):
        raise _Refused(f"{frepr} values cannot be stored; map them to numbers or bytes first")
    if pa.types.is_null(t):
        raise _Refused("it holds only nulls; drop it with Dataset.remove_columns")
    if _is_string(t):
        if utf8:
            return _Plan(column, "ragged", "bytes", np.dtype(np.uint8), (None,), frepr)
        raise _Refused(_leaf_advice(column, t, False))
    if utf8:
        raise _Refused(f"utf8= applies to string columns, and {column!r} is {frepr}")
    if _is_bytes(t):
        return _Plan(column, "ragged", "bytes", np.dtype(np.uint8), (None,), frepr)
    if pa.types.is_struct(t):
        fields = _field_types(t)
        if sorted(fields) == ["shape", "values"]:
            values, shape_t = fields["values"], fields["shape"]
            if (
                (pa.types.is_list(values) or pa.types.is_large_list(values))
                and _is_number(_value_type(values))
                and pa.types.is_fixed_size_list(shape_t)
                and pa.types.is_uint64(_value_type(shape_t))
                and shape_t.list_size >= 1
            ):
                if dense:
                    raise _Refused("dense= applies to lists, not {values, shape} structs")
                dims: tuple[int | None, ...] = (None,) * shape_t.list_size
                return _Plan(
                    column, "ragged", "struct", _numpy_dtype(_value_type(values)), dims, frepr
                )
        raise _Refused(
            f"a struct of fields {list(fields)} is not one array; store each field as its "
            "own column (Dataset.flatten), or as {values: list<number>, "
            "shape: fixed_size_list<uint64, ndim>} for a multidimensional record"
        )
    dims, leaf = _nested_dims(t)
    if type(_leaf_feature(feature)).__name__ in _FILE_FEATURES:
        raise _Refused(
            "lists of encoded files are not one array; give each file its own row "
            "(Dataset.map with batched=True) to store one record per file"
        )
    if not _is_number(leaf):
        raise _Refused(_leaf_advice(column, leaf, False))
    names = _class_names(feature)
    dtype = _numpy_dtype(leaf)
    if all(d is not None for d in dims):
        if dense:
            raise _Refused(f"dense= is for lists of undeclared length; {frepr} is already Dense")
        return _Plan(column, "dense", "number" if not dims else "nested", dtype, dims, frepr, names)
    if dense:
        # The item shape comes from the first record; every other must match it.
        return _Plan(column, "dense", "nested", dtype, dims, frepr, names)
    return _Plan(column, "ragged", "nested", dtype, dims, frepr, names)


def _leaf_feature(feature: object) -> object:
    while type(feature).__name__ in ("List", "LargeList", "Sequence"):
        feature = getattr(feature, "feature", None)
    return feature


# ---- reading Arrow chunks into records -------------------------------------------


class _BadRecord(InvalidArgumentError):
    """A record that does not fit its column's plan; the message names it."""


def _no_nulls(arr: _Array, plan: _Plan, row0: int) -> None:
    if arr.null_count:
        raise _BadRecord(
            f"column {plan.column!r}: {arr.null_count} null value(s) inside the records "
            f"from row {row0}; fill them (Dataset.map) or drop those rows (Dataset.filter)"
        )


def _segment_lengths(
    lengths: npt.NDArray[np.int64], starts: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """For each segment starts[r]..starts[r+1] of `lengths`: its common length (0
    when empty) and whether its lengths differ."""
    n = len(starts) - 1
    common = np.zeros(n, dtype=np.int64)
    ragged = np.zeros(n, dtype=np.bool_)
    nonempty = np.flatnonzero(starts[1:] > starts[:-1])
    if len(nonempty) and len(lengths):
        at = starts[nonempty]
        lo = np.minimum.reduceat(lengths, at)
        hi = np.maximum.reduceat(lengths, at)
        common[nonempty] = hi
        ragged[nonempty] = lo != hi
    return common, ragged


def _nested(
    arr: _Array, plan: _Plan, row0: int
) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The leaf values of a chunk of (nested) lists, each record's element offsets
    into them, and each record's shape, checked to be a regular array."""
    import pyarrow as pa

    n = len(arr)
    if isinstance(arr.type, pa.ExtensionType):
        arr = cast("_ExtensionArray", arr).storage
    starts = np.arange(n + 1, dtype=np.int64)
    shapes = np.empty((n, len(plan.dims)), dtype=np.int64)
    for level, declared in enumerate(plan.dims):
        _no_nulls(arr, plan, row0)
        lists = cast("_ListArray", arr)
        if pa.types.is_fixed_size_list(arr.type):
            size = cast("pa.FixedSizeListType[pa.DataType]", arr.type).list_size
            shapes[:, level] = size
            starts = starts * size
        else:
            off = lists.offsets.to_numpy().astype(np.int64)
            rel = off - off[0]
            lengths = np.diff(rel)
            common, irregular = _segment_lengths(lengths, starts)
            if declared is not None:
                irregular |= (starts[1:] > starts[:-1]) & (common != declared)
                common[:] = declared
            if irregular.any():
                r = int(np.flatnonzero(irregular)[0])
                what = "is not a regular array" if declared is None else "is not"
                want = "" if declared is None else f" of length {declared} at level {level}"
                raise _BadRecord(
                    f"column {plan.column!r}: row {row0 + r} {what}{want}: its lists at "
                    f"level {level} differ in length; pad them to one length or store "
                    "values and shape in a {values, shape} struct"
                )
            shapes[:, level] = common
            starts = rel[starts]
        arr = lists.flatten()
    _no_nulls(arr, plan, row0)
    values = arr.to_numpy(zero_copy_only=False)
    return values, starts, shapes


def _bytes_values(
    arr: _Array,
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The bytes and (rebased) offsets of a binary or string array, without copying."""
    import pyarrow as pa

    n = len(arr)
    # pyarrow Buffers export the buffer protocol, which their stubs do not declare.
    bufs = cast("list[bytes | None]", arr.buffers())
    wide = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(cast(bytes, bufs[1]), np.int64 if wide else np.int32)[
        arr.offset : arr.offset + n + 1
    ].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    return data[offsets[0] : offsets[-1]], offsets - offsets[0]


def _fields(arr: _Array) -> dict[str, _Array]:
    """A struct array's children, sliced like the struct."""
    struct = cast("_StructArray", arr)
    return dict(zip(_field_types(struct.type), struct.flatten(), strict=True))


def _files(arr: _Array, plan: _Plan, row0: int) -> list[bytes]:
    """The encoded file of each row of a {bytes, path} column: its bytes, or the
    file at its path when the dataset keeps only the path."""
    fields = _fields(arr)
    data, paths = fields["bytes"], fields["path"]
    if not data.null_count:
        values, offsets = _bytes_values(data)
        return [values[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    out: list[bytes] = []
    for r, (b, p) in enumerate(zip(data.to_pylist(), paths.to_pylist(), strict=True)):
        if b is not None:
            out.append(cast(bytes, b))
            continue
        if p is None:
            raise _BadRecord(f"column {plan.column!r}: row {row0 + r} has neither bytes nor a path")
        try:
            with open(cast(str, p), "rb") as f:
                out.append(f.read())
        except OSError as e:
            raise _BadRecord(
                f"column {plan.column!r}: row {row0 + r} refers to the file {p!r}, which "
                f"cannot be read ({e.strerror}); embed the files first (Dataset.map with "
                "the feature's decode=False keeps them as bytes)"
            ) from None
    return out


def _pillow() -> object:
    try:
        return importlib.import_module("PIL.Image")
    except ImportError as e:
        raise MissingDependencyError(
            "decode= decodes images with Pillow, which is not installed: "
            "`pip install pillow`, or leave decode= out to store the encoded files",
            name="PIL",
        ) from e


def _decode_image(data: bytes, plan: _Plan, row: int) -> npt.NDArray[np.generic]:
    """The pixels of one encoded image, as datasets decodes them: EXIF orientation
    applied, converted to the feature's mode when it declares one."""
    image_mod = cast("_PILImage", _pillow())
    ops = cast("_PILOps", importlib.import_module("PIL.ImageOps"))
    try:
        img = image_mod.open(io.BytesIO(data))
        img.load()
    except Exception as e:  # Pillow raises many kinds for a damaged file
        raise _BadRecord(f"column {plan.column!r}: row {row} is not a decodable image: {e}") from e
    img = ops.exif_transpose(img)
    if plan.image_mode is not None and img.mode != plan.image_mode:
        img = img.convert(plan.image_mode)
    elif img.mode == "P":
        raise _BadRecord(
            f"column {plan.column!r}: row {row} is a palette image, whose pixels are "
            "palette indices; declare the mode to decode to, e.g. "
            f"dataset.cast_column({plan.column!r}, Image(mode='RGB'))"
        )
    return np.asarray(img)


def _soundfile() -> _SoundFile:
    try:
        return cast(_SoundFile, importlib.import_module("soundfile"))
    except (ImportError, OSError) as e:  # OSError: the module found no libsndfile
        raise MissingDependencyError(
            "decode= decodes audio with soundfile, which is not installed: "
            "`pip install soundfile`, or leave decode= out to store the encoded files",
            name="soundfile",
        ) from e


# The sample type each subtype of integer PCM decodes to; every other subtype
# (floats, and lossy codecs that decode to floats) keeps its float width.
_PCM_DTYPES = {"PCM_S8": "int16", "PCM_U8": "int16", "PCM_16": "int16", "PCM_24": "int32",
               "PCM_32": "int32", "DOUBLE": "float64"}  # fmt: skip


def _decode_audio(data: bytes, plan: _Plan, row: int) -> npt.NDArray[np.generic]:
    """The samples of one encoded audio file as ``(frames, channels)``, in the
    narrowest type that holds them exactly (int16 for 8- and 16-bit PCM, int32
    for 24- and 32-bit, float32 or float64 for float data), at the file's own
    rate, which must be the column's: resampling is the application's choice."""
    sf = _soundfile()
    try:
        info = sf.info(io.BytesIO(data))
        dtype = _PCM_DTYPES.get(info.subtype, "float32")
        samples, rate = sf.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    except Exception as e:  # libsndfile's errors for a damaged or unknown file
        raise _BadRecord(f"column {plan.column!r}: row {row} is not decodable audio: {e}") from e
    if plan.sampling_rate is None:
        plan.sampling_rate = int(rate)
    elif rate != plan.sampling_rate:
        raise _BadRecord(
            f"column {plan.column!r}: row {row} is sampled at {rate} Hz, the column at "
            f"{plan.sampling_rate} Hz; one store holds one rate: resample with Dataset.map "
            "first, or store the encoded files (leave the column out of decode=)"
        )
    return np.ascontiguousarray(samples)


class _SoundInfo(Protocol):
    @property
    def subtype(self) -> str: ...


class _SoundFile(Protocol):
    def info(self, file: io.BytesIO) -> _SoundInfo: ...
    def read(
        self, file: io.BytesIO, *, dtype: str, always_2d: bool
    ) -> tuple[npt.NDArray[np.generic], int]: ...


class _PILImageObj(Protocol):
    @property
    def mode(self) -> str: ...
    def load(self) -> object: ...
    def convert(self, mode: str) -> _PILImageObj: ...


class _PILImage(Protocol):
    def open(self, fp: io.BytesIO) -> _PILImageObj: ...


class _PILOps(Protocol):
    def exif_transpose(self, image: _PILImageObj) -> _PILImageObj: ...


def _agree(plan: _Plan, dtype: np.dtype, shape: tuple[int, ...], row: int) -> None:
    """Fixes a decoded column's dtype and shape from its first record, or checks a
    later record against them."""
    if plan.dtype is None:
        plan.dtype = dtype
        if plan.kind == "dense":
            plan.shape = shape
        else:
            plan.ndim = len(shape)
        return
    audio = plan.source == "audio"
    fix = (
        "convert the files to one sample format with Dataset.map first"
        if audio
        else "declare one mode with Image(mode=...)"
    )
    if dtype != plan.dtype:
        raise _BadRecord(
            f"column {plan.column!r}: row {row} decodes to {dtype}, earlier rows to "
            f"{plan.dtype}; {fix}"
        )
    if plan.kind == "ragged" and len(shape) != plan.ndim:
        raise _BadRecord(
            f"column {plan.column!r}: row {row} has {len(shape)} dimensions, earlier rows "
            f"{plan.ndim}; {fix}"
        )
    if plan.kind == "dense" and shape != plan.shape:
        what = "file's length and channels" if audio else "image's size"
        redo = "trim or pad them" if audio else "resize them"
        raise _BadRecord(
            f"column {plan.column!r}: row {row} has shape {shape}, earlier rows "
            f"{plan.shape}; a Dense store holds one shape: use decode={{{plan.column!r}: "
            f"'ragged'}} to keep each {what}, or {redo} with Dataset.map"
        )


def _same_shape(plan: _Plan, shapes: npt.NDArray[np.int64], row0: int) -> tuple[int, ...]:
    """The one item shape of a Dense column read from lists, checked on every row."""
    if plan.shape is None:
        plan.shape = tuple(int(d) for d in shapes[0])
    differ = np.flatnonzero((shapes != np.asarray(plan.shape, dtype=np.int64)).any(axis=1))
    if len(differ):
        r = int(differ[0])
        raise _BadRecord(
            f"column {plan.column!r}: row {row0 + r} has shape {tuple(shapes[r].tolist())}, "
            f"row 0 {plan.shape}; a Dense store holds one shape: leave {plan.column!r} out "
            "of dense= to store each record with its own shape (Ragged)"
        )
    return plan.shape


def _cast(
    values: npt.NDArray[np.generic],
    plan: _Plan,
    row0: int,
    starts: npt.NDArray[np.int64] | None,
) -> npt.NDArray[np.generic]:
    """`values` in the dtype dtypes= asked for. Integers and booleans must keep
    their value exactly; floats narrowed to a smaller float are rounded, which is
    what asking for it means."""
    if plan.cast_from is None:
        return values
    assert plan.dtype is not None
    out = values.astype(plan.dtype)
    if plan.cast_from.kind in "biu":
        changed = np.flatnonzero(out.astype(plan.cast_from) != values)
        if len(changed):
            i = int(changed[0])
            r = i if starts is None else int(np.searchsorted(starts, i, side="right")) - 1
            raise _BadRecord(
                f"column {plan.column!r}: row {row0 + r} holds {values[i].item()!r}, which "
                f"{plan.dtype} cannot hold exactly ({out[i].item()!r}); ask dtypes= for a "
                "wider type"
            )
    return out


def _chunk(arr: _Array, plan: _Plan, row0: int) -> Records:
    """The records of one Arrow chunk: a stacked array for Dense, a RaggedBatch
    for Ragged."""
    n = len(arr)
    _no_nulls(arr, plan, row0)
    if plan.source == "number":
        assert plan.dtype is not None
        values = _cast(arr.to_numpy(zero_copy_only=False), plan, row0, None)
        return np.ascontiguousarray(values, plan.dtype)
    if plan.source == "nested":
        values, starts, shapes = _nested(arr, plan, row0)
        values = _cast(values, plan, row0, starts)
        assert plan.dtype is not None
        if plan.kind == "ragged":
            return _ragged(values, starts, shapes, plan.dtype)
        shape = _same_shape(plan, shapes, row0) if n else cast("tuple[int, ...]", plan.shape)
        return np.ascontiguousarray(values, plan.dtype).reshape((n, *shape))
    if plan.source == "bytes":
        values, offsets = _bytes_values(arr)
        return _ragged(values, offsets, np.diff(offsets).reshape(n, 1), np.dtype(np.uint8))
    if plan.source == "struct":
        fields = _fields(arr)
        values, starts, _ = _nested(
            fields["values"], _Plan(plan.column, "ragged", "nested", plan.dtype, (None,)), row0
        )
        values = _cast(values, plan, row0, starts)
        shape_plan = _Plan(plan.column, "dense", "nested", np.dtype(np.uint64), (plan.ndim,))
        shape_values, _, _ = _nested(fields["shape"], shape_plan, row0)
        shapes = shape_values.astype(np.int64).reshape(n, plan.ndim)
        sizes = np.prod(shapes, axis=1)
        bad = np.flatnonzero(sizes != np.diff(starts))
        if len(bad):
            r = int(bad[0])
            raise _BadRecord(
                f"column {plan.column!r}: row {row0 + r} has {int(np.diff(starts)[r])} "
                f"values but shape {tuple(shapes[r].tolist())}"
            )
        assert plan.dtype is not None
        return _ragged(values, starts, shapes, plan.dtype)
    if plan.source == "file" and not _fields(arr)["bytes"].null_count:
        # Every row holds its file: the bytes are used where Arrow keeps them.
        values, offsets = _bytes_values(_fields(arr)["bytes"])
        return _ragged(values, offsets, np.diff(offsets).reshape(n, 1), np.dtype(np.uint8))
    files = _files(arr, plan, row0)
    if plan.source == "file":
        sizes = np.fromiter((len(f) for f in files), dtype=np.int64, count=n)
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        values = np.frombuffer(b"".join(files), dtype=np.uint8)
        return _ragged(values, starts, sizes.reshape(n, 1), np.dtype(np.uint8))
    decode = _decode_audio if plan.source == "audio" else _decode_image
    images: list[npt.NDArray[np.generic]] = []
    for r, f in enumerate(files):
        pixels = decode(f, plan, row0 + r)
        _agree(plan, pixels.dtype, tuple(pixels.shape), row0 + r)
        images.append(pixels)
    if plan.kind == "dense":
        return np.stack(images)
    return RaggedBatch.from_records(images)


class _TooBig(Exception):
    """A Ragged chunk whose elements overflow int32 cu_seqlens."""


_INT32_MAX = int(np.iinfo(np.int32).max)


def _ragged(
    values: npt.NDArray[np.generic],
    starts: npt.NDArray[np.int64],
    shapes: npt.NDArray[np.int64],
    dtype: np.dtype,
) -> RaggedBatch:
    if int(starts[-1]) > _INT32_MAX:
        raise _TooBig
    return RaggedBatch(
        np.ascontiguousarray(values, dtype),
        starts.astype(np.int32),
        np.ascontiguousarray(shapes, np.uint64),
    )


def _records(arr: _Array, plan: _Plan, row0: int) -> Iterator[tuple[int, Records]]:
    """(rows, records) for `arr`, in slices small enough for int32 cu_seqlens and,
    for decoded images and audio, of at most DECODE_ROWS rows."""
    step = DECODE_ROWS if plan.source in ("image", "audio") else max(len(arr), 1)
    for lo in range(0, len(arr), step):
        piece = arr.slice(lo, step)
        try:
            yield len(piece), _chunk(piece, plan, row0 + lo)
        except _TooBig:
            if len(piece) == 1:
                raise InvalidArgumentError(
                    f"column {plan.column!r}: row {row0 + lo} holds 2**31 or more "
                    "elements, more than one Ragged record can"
                ) from None
            half = len(piece) // 2
            yield from _records(piece.slice(0, half), plan, row0 + lo)
            yield from _records(piece.slice(half), plan, row0 + lo + half)


def _nbytes(records: Records) -> int:
    if isinstance(records, RaggedBatch):
        return int(np.from_dlpack(records.values).nbytes)
    return int(records.nbytes)


def _one_chunk(table: pa.Table, column: str) -> list[_Array]:
    """A batch's column as one Arrow array: a dataset saved by datasets holds
    chunks of 1,000 rows, and one append per batch costs less than one per chunk."""
    import pyarrow as pa

    chunks = table.column(column).chunks
    if len(chunks) <= 1:
        return cast("list[_Array]", chunks)
    return [cast(_Array, pa.concat_arrays(chunks))]


def _batches(dataset: Dataset, rows: int) -> Iterator[pa.Table]:
    """The dataset's rows as Arrow tables of at most `rows` rows, in order."""
    # datasets leaves the type of format arguments open; its "arrow" format yields
    # pyarrow Tables.
    arrow = dataset.with_format("arrow")  # pyright: ignore[reportUnknownMemberType]
    yield from cast("Iterator[pa.Table]", arrow.iter(batch_size=rows))


# ---- inputs and options ----------------------------------------------------------

_WHAT_TO_PASS = (
    "convert takes a datasets.Dataset, a datasets.DatasetDict (or a dict of split "
    "name to Dataset) or a pyarrow.Table"
)


def _not_a_dataset(obj: object, where: str = "") -> TypeError:
    kind = type(obj).__name__
    if kind in ("IterableDataset", "IterableDatasetDict"):
        hint = "materialize it first (for example with Dataset.from_generator)"
    elif isinstance(obj, Mapping):
        hint = (
            "for a dict of columns, pass datasets.Dataset.from_dict(columns, "
            "features=datasets.Features({...})) so that each column's type is declared"
        )
    elif isinstance(obj, np.ndarray):
        hint = (
            "for a NumPy array, pass datasets.Dataset.from_dict({'name': array}), or write "
            "it directly with Dense.create(path, array.dtype, array.shape[1:], codec=...)"
        )
    elif isinstance(obj, (str, bytes, os.PathLike)):
        hint = (
            "for a directory written by save_to_disk, pass datasets.load_from_disk(path); "
            "for Parquet files, datasets.Dataset.from_parquet(path)"
        )
    elif kind == "DataFrame":
        hint = "for a pandas DataFrame, pass datasets.Dataset.from_pandas(df)"
    else:
        hint = "build one with datasets.Dataset.from_dict, from_parquet or load_from_disk"
    return TypeError(
        f"{_WHAT_TO_PASS}, not {'an' if kind[0] in 'AEIOU' else 'a'} {kind}{where}: {hint}"
    )


def _is_dataset(obj: object) -> bool:
    return all(hasattr(obj, a) for a in ("features", "with_format", "data", "column_names"))


def _from_table(table: pa.Table) -> Dataset:
    import datasets  # pyright: ignore[reportMissingTypeStubs]
    from datasets.table import InMemoryTable  # pyright: ignore[reportMissingTypeStubs]

    return datasets.Dataset(InMemoryTable(table))


def _is_table(dataset: object) -> bool:
    import pyarrow as pa

    return isinstance(dataset, pa.Table)


#: The keys convert writes into every store's attributes.
ATTRS_KEYS = (
    "converter",
    "column",
    "split",
    "feature",
    "arrow_type",
    "source",
    "class_names",
    "decode",
    "utf8",
    "cast_from",
)


def _check_extra_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise TypeError(f"attrs must be a dict with str keys, got {type(attrs).__name__}")
    taken = sorted(set(attrs) & set(ATTRS_KEYS))
    if taken:
        raise InvalidArgumentError(
            f"attrs= uses the key(s) {taken}, which convert writes itself; use other names"
        )
    return dict(attrs)


def _splits(dataset: object) -> dict[str | None, Dataset]:
    """The datasets to convert, by split name (None for a single Dataset)."""
    import pyarrow as pa

    if isinstance(dataset, pa.Table):
        return {None: _from_table(dataset)}
    if _is_dataset(dataset):
        return {None: cast("Dataset", dataset)}
    if type(dataset).__name__ == "DatasetDict" or (
        isinstance(dataset, Mapping)
        and dataset
        and all(_is_dataset(v) for v in cast("Mapping[object, object]", dataset).values())
    ):
        d = cast("Mapping[object, object]", dataset)
        if not d:
            raise InvalidArgumentError("the DatasetDict has no splits")
        out: dict[str | None, Dataset] = {}
        for split, ds in d.items():
            if not _is_dataset(ds):
                raise _not_a_dataset(ds, f" as split {split!r}")
            out[_check_name(split, "split")] = cast("Dataset", ds)
        return out
    raise _not_a_dataset(cast(object, dataset))


def _null_count(ds: Dataset, column: str) -> int:
    # datasets' Table wrapper leaves column()'s type open; it is a ChunkedArray.
    col = ds.data.column(column)  # pyright: ignore[reportUnknownMemberType]
    return int(cast("pa.ChunkedArray[pa.Scalar[pa.DataType]]", col).null_count)


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


def _names(option: Iterable[str] | None, what: str) -> frozenset[str]:
    if option is None:
        return frozenset()
    if isinstance(option, str):
        raise TypeError(f"{what} takes a list of column names, not the string {option!r}")
    return frozenset(option)


def _retype(plan: _Plan, dtype: object) -> str | None:
    """Makes `plan` store `dtype` as dtypes= asks, or says why it cannot."""
    if plan.source not in ("number", "nested", "struct"):
        return f"dtypes= applies to columns of numbers, and this one is {plan.feature}"
    try:
        target = check_dtype(dtype)
    except (InvalidArgumentError, TypeError) as e:
        return f"dtypes= gives {dtype!r}: {e}"
    assert plan.dtype is not None
    if target == plan.dtype:
        return None
    if plan.dtype.kind in "fc" and target.kind in "biu":
        return (
            f"dtypes= asks {plan.dtype} values to become {target}, which truncates them; "
            "round them with Dataset.map first"
        )
    if plan.dtype.kind == "c" and target.kind == "f":
        return (
            f"dtypes= asks {plan.dtype} values to become {target}, which drops the imaginary part"
        )
    plan.cast_from, plan.dtype = plan.dtype, target
    return None


def _codec_of(codec: str | Mapping[str, str], column: str) -> str | None:
    if isinstance(codec, str):
        return codec
    return codec.get(column)


@dataclass
class _Split:
    name: str | None
    ds: Dataset
    from_table: bool = False
    plans: list[_Plan] = field(default_factory=lambda: [])


def _plan_splits(
    splits: dict[str | None, Dataset],
    tables: set[int],
    codec: str | Mapping[str, str],
    decode: Mapping[str, Layout],
    dense: frozenset[str],
    utf8: frozenset[str],
    dict_bytes: Mapping[str, bytes],
    dtypes: Mapping[str, object],
) -> list[_Split]:
    """Every column's plan, or one InvalidArgumentError naming every column (and
    option) that cannot be converted, with what to do instead."""
    problems: dict[str, str] = {}  # one entry per column and problem, in order
    out: list[_Split] = []
    seen: set[str] = set()
    for name, ds in splits.items():
        where = "" if name is None else f" of split {name!r}"
        if len(ds.column_names) == 0:
            problems[f"split{name}"] = f"the dataset{where} has no columns"
        elif len(ds) == 0:
            problems[f"split{name}"] = (
                f"the dataset{where} has no rows; there is nothing to convert"
            )
        split = _Split(name, ds, from_table=id(ds) in tables)
        types = _field_types(ds.data.schema)
        # Features is an untyped dict of the column's feature objects.
        features = cast("Mapping[str, object]", ds.features)
        for c in ds.column_names:
            seen.add(c)
            try:
                _check_name(c, "column")
                plan = _plan(
                    c,
                    types[c],
                    features.get(c),
                    decode=decode.get(c),
                    dense=c in dense,
                    utf8=c in utf8,
                )
                nulls = _null_count(ds, c)
                if nulls and ds.num_rows == len(ds.data):
                    raise _Refused(
                        f"{nulls} null value(s); fill them (Dataset.map) or drop those rows "
                        "(Dataset.filter): a store has no nulls"
                    )
            except _Refused as e:
                problems.setdefault(f"column {c!r}", f"column {c!r}{where}: {e}")
                continue
            except InvalidArgumentError as e:
                problems.setdefault(f"column {c!r}", str(e))
                continue
            cc = _codec_of(codec, c)
            if cc is None:
                problems[f"codec {c!r}"] = f"codec= names no codec for column {c!r}"
                continue
            if cc not in CODECS:
                problems[f"codec {c!r}"] = (
                    f"codec {cc!r} for column {c!r} is not one of {', '.join(CODECS)}"
                )
                continue
            if c in dict_bytes and cc != "zstd_dict":
                problems[f"dict {c!r}"] = (
                    f"dict_bytes= gives a dictionary for column {c!r}, whose codec is {cc!r}"
                )
            if c in dtypes:
                why = _retype(plan, dtypes[c])
                if why is not None:
                    problems[f"dtypes {c!r}"] = f"column {c!r}{where}: {why}"
                    continue
            plan.codec = cc
            plan.dictionary = dict_bytes.get(c)
            split.plans.append(plan)
        out.append(split)
    for option, names in (
        ("decode", set(decode)),
        ("dense", dense),
        ("utf8", utf8),
        ("dtypes", set(dtypes)),
    ):
        for c in sorted(names - seen):
            problems[f"{option} {c}"] = f"{option}= names {c!r}, which is not a column"
    if not isinstance(codec, str):
        for c in sorted(set(codec) - seen):
            problems[f"codec {c}"] = f"codec= names {c!r}, which is not a column"
    for c in sorted(set(dict_bytes) - seen):
        problems[f"dict {c}"] = f"dict_bytes= names {c!r}, which is not a column"
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems.values())
        raise InvalidArgumentError(
            f"convert wrote nothing: {len(problems)} column(s) or option(s) need a change:\n{lines}"
        )
    return out


# ---- zstd dictionaries -----------------------------------------------------------

#: Rows read first to estimate a column's record size before sampling it.
_PROBE_ROWS = 256


def _sample_records(ds: Dataset, plan: _Plan, positions: npt.NDArray[np.int64]) -> list[Records]:
    # A copy: the sample must not fix a decoded column's shape for the real write.
    probe = dataclasses.replace(plan)
    subset = ds.select(positions.tolist())  # pyright: ignore[reportUnknownMemberType]
    out: list[Records] = []
    row = 0
    for table in _batches(subset, BATCH_ROWS):
        for arr in _one_chunk(table, plan.column):
            for rows, records in _records(arr, probe, row):
                out.append(records)
                row += rows
    return out


def _spread(n: int, k: int) -> npt.NDArray[np.int64]:
    """`k` evenly spread positions in 0..n-1 (all of them when k >= n)."""
    if k >= n:
        return np.arange(n, dtype=np.int64)
    return np.arange(k, dtype=np.int64) * n // k


def _train(ds: Dataset, plan: _Plan) -> bytes:
    """A zstd dictionary trained from evenly spread records of the column: about
    as many bytes as train_dict samples."""
    from .utils import DEFAULT_DICT_SIZE, SAMPLE_RATIO, train_dict

    n = len(ds)
    probe = _sample_records(ds, plan, _spread(n, _PROBE_ROWS))
    probed = min(n, _PROBE_ROWS)
    mean = max(1.0, sum(_nbytes(r) for r in probe) / max(probed, 1))
    k = min(n, max(_PROBE_ROWS, math.ceil(SAMPLE_RATIO * DEFAULT_DICT_SIZE / mean)))
    sample = probe if k == probed else _sample_records(ds, plan, _spread(n, k))
    source: list[Records] | npt.NDArray[np.generic]
    if plan.kind == "dense":
        source = np.concatenate(cast("list[npt.NDArray[np.generic]]", sample))
    else:
        source = sample
    try:
        return train_dict(source)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            f"column {plan.column!r}: no zstd dictionary can be trained from it: {e}"
        ) from None


def _dictionaries(splits: list[_Split]) -> None:
    """Trains one dictionary per zstd_dict column without one from dict_bytes=,
    from the largest split that has the column, for every split's store."""
    trained: dict[str, bytes] = {}
    for split in sorted(splits, key=lambda s: -len(s.ds)):
        for plan in split.plans:
            if plan.codec != "zstd_dict" or plan.dictionary is not None:
                continue
            if plan.column not in trained:
                trained[plan.column] = _train(split.ds, plan)
            plan.dictionary = trained[plan.column]


# ---- writing ---------------------------------------------------------------------


def _stored_bytes(path: str) -> int:
    """Bytes of a store's data files and dictionary."""
    return sum(
        os.path.getsize(os.path.join(path, f))
        for f in os.listdir(path)
        if (f.startswith("data-") and f.endswith(".bin")) or f == "dict.bin"
    )


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
    plan: _Plan,
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
            for table in _batches(column, BATCH_ROWS):
                for arr in _one_chunk(table, plan.column):
                    for n, records in _records(arr, plan, rows):
                        if writer is None:
                            writer = _create(plan, root, data_shards, attrs)
                        if isinstance(writer, DenseWriter):
                            writer.append(cast("npt.NDArray[np.generic]", records))
                        else:
                            writer.append(cast(RaggedBatch, records))
                        size = _nbytes(records)
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
        stored_bytes=_stored_bytes(path),
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
    source.update(_HUB_SOURCES.get(ds, {}))
    return source


def _attrs(split: _Split, plan: _Plan, t: pa.DataType, extra: Mapping[str, Any]) -> dict[str, Any]:
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
    elif plan.source == "bytes" and _is_string(t):
        out["utf8"] = True
    out.update(extra)
    return out


def _create(
    plan: _Plan, root: str, data_shards: int, attrs: dict[str, Any]
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
    _pa()
    if not isinstance(codec, (str, Mapping)):
        raise TypeError(f"codec takes a codec name or a dict of column to codec, not {codec!r}")
    if isinstance(codec, str) and codec not in CODECS:
        raise InvalidArgumentError(
            f"codec must be one of {', '.join(map(repr, CODECS))}, got {codec!r}"
        )
    data_shards = check_int(data_shards, "data_shards", 1)
    splits = _splits(dataset)
    is_table = _is_table(dataset)
    extra = _check_extra_attrs(attrs)
    dest = os.path.abspath(path)
    if os.path.lexists(dest):
        raise StoreExistsError(f"{dest}: already exists; convert writes a new path")
    decode = dict(decode or {})
    for c, layout in decode.items():
        if layout not in ("dense", "ragged"):
            raise InvalidArgumentError(
                f"decode={{{c!r}: {layout!r}}}: the layout is 'dense' or 'ragged'"
            )
    plans = _plan_splits(
        splits,
        {id(ds) for ds in splits.values()} if is_table else set(),
        codec,
        decode,
        _names(dense, "dense"),
        _names(utf8, "utf8"),
        dict(dict_bytes or {}),
        dict(dtypes or {}),
    )
    _dictionaries(plans)
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
                t = _field_types(split.ds.data.schema)[plan.column]
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
        r = dataclasses.replace(r, path=moved)
        advice = _advice(r)
        if advice is not None:
            r = dataclasses.replace(r, advice=advice)
            warnings.warn(advice, CodecAdviceWarning, stacklevel=2)
        final.append(r)
    return Conversion(dest, tuple(final))


# ---- the Hub ---------------------------------------------------------------------

# Where each Dataset that huggingface() returned came from, for its stores'
# attributes. Weak: a dataset derived with map() or select() is a new object and
# keeps only what datasets itself records.
_HUB_SOURCES: weakref.WeakKeyDictionary[object, dict[str, str]] = weakref.WeakKeyDictionary()

_NETWORK_ERRORS = frozenset(
    {
        "TransportError",
        "NetworkError",
        "ConnectError",
        "ConnectTimeout",
        "TimeoutException",
        "ProxyError",
        "ConnectionError",
        "Timeout",
        "SSLError",
    }
)


def _is_network_error(e: BaseException) -> bool:
    """Whether `e` says the endpoint could not be reached (as opposed to an answer
    from it, such as an unknown repository)."""
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    return any(t.__name__ in _NETWORK_ERRORS for t in type(e).__mro__)


def _cause(e: BaseException) -> str:
    """The innermost message of a chain of wrapped network errors, on one line."""
    while e.__cause__ is not None:
        e = e.__cause__
    return " ".join(str(e).split()) or type(e).__name__


def huggingface(
    repo: str,
    *,
    config: str | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> DatasetDict:
    """The ``DatasetDict`` of the dataset repository `repo` at `revision` (default:
    the main branch), configuration `config`.

    Online, the revision is first resolved to its immutable commit, and that
    commit's snapshot is downloaded into the hub cache (`cache_dir`, default
    huggingface_hub's). `endpoint` selects a mirror or a private Hub and `token`
    authorizes private or gated repositories, without touching the process
    environment.

    Offline (``HF_HUB_OFFLINE=1``) or when the endpoint cannot be reached, the
    revision's snapshot is taken from the hub cache if it is there, with a one-line
    notice on stderr naming the commit; otherwise a ``StorageError`` says which
    endpoint failed and what to try. The network error stays on the exception's
    ``__context__`` without being printed."""
    try:
        # Both type most of their API; the rest (snapshot_download's keywords,
        # load_dataset's) is what pyright calls unknown.
        import datasets  # pyright: ignore[reportMissingTypeStubs]
        from huggingface_hub import (
            HfApi,
            constants,
            snapshot_download,  # pyright: ignore[reportUnknownVariableType]
        )
        from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled
    except ImportError as e:
        raise MissingDependencyError(
            "huggingface needs the converter extra: run `pip install -e '.[converter]'` in the "
            "loaderx checkout",
            name=e.name,
        ) from e
    ep = endpoint or constants.ENDPOINT
    cache = None if cache_dir is None else os.fspath(cache_dir)
    wanted = revision or "main"
    offline = bool(constants.HF_HUB_OFFLINE)
    unreachable: BaseException | None = None
    commit: str | None = None
    if not offline:
        try:
            commit = HfApi(endpoint=endpoint, token=token).dataset_info(repo, revision=revision).sha
        except OfflineModeIsEnabled:
            offline = True
        except Exception as e:
            if not _is_network_error(e):
                raise
            unreachable = e
    if commit is not None:
        try:
            local = snapshot_download(
                repo,
                repo_type="dataset",
                revision=commit,
                endpoint=endpoint,
                token=token,
                cache_dir=cache,
            )
        except Exception as e:
            if not _is_network_error(e):
                raise
            raise StorageError(
                f"{repo}: the download of commit {commit} from {ep} failed ({_cause(e)}); "
                "check the network or proxy and call huggingface() again (finished files "
                "stay in the hub cache)"
            ) from None
    else:
        try:
            local = snapshot_download(
                repo,
                repo_type="dataset",
                revision=wanted,
                cache_dir=cache,
                local_files_only=True,
            )
        except LocalEntryNotFoundError:
            where = cache or constants.HF_HUB_CACHE
            if unreachable is not None:
                raise StorageError(
                    f"{repo}: cannot reach the Hub at {ep} ({_cause(unreachable)}) and revision "
                    f"{wanted!r} is not in the hub cache ({where}): check the network or proxy "
                    "(HTTPS_PROXY) or pass endpoint= a reachable mirror; once it is cached, "
                    "HF_HUB_OFFLINE=1 skips the network; or convert a local copy "
                    "(datasets.load_from_disk of a save_to_disk directory)"
                ) from None
            raise StorageError(
                f"{repo}: HF_HUB_OFFLINE is set and revision {wanted!r} is not in the hub "
                f"cache ({where}): download it once with network access, or convert a local "
                "copy (datasets.load_from_disk of a save_to_disk directory)"
            ) from None
        commit = os.path.basename(os.path.normpath(local))
        why = "offline (HF_HUB_OFFLINE)" if unreachable is None else f"{ep} unreachable"
        print(
            f"loaderx.huggingface: {why}: using the cached snapshot {commit} of {repo} "
            f"(revision {wanted!r})",
            file=sys.stderr,
            flush=True,
        )
    loaded = datasets.load_dataset(local, config)  # pyright: ignore[reportUnknownMemberType]
    for split, ds in cast("Mapping[str, object]", loaded).items():
        _HUB_SOURCES[ds] = {
            "hub_repo": repo,
            "hub_revision": wanted,
            "hub_commit": commit,
            "hub_endpoint": ep,
            "config": config or "",
            "split": split,
        }
    return loaded


def load_source(
    source: str | os.PathLike[str], *, config: str | None = None, revision: str | None = None
) -> Dataset | DatasetDict:
    """The dataset `source` names, for ``convert``: a directory written by
    ``save_to_disk`` (a ``Dataset`` or ``DatasetDict``), a ``.parquet`` file, an
    ``.arrow`` file as ``datasets`` writes them (Arrow IPC stream), or, when no
    such path exists, a Hub dataset id fetched with :func:`huggingface` (`config`
    and `revision` apply to it)."""
    try:
        import datasets  # pyright: ignore[reportMissingTypeStubs]
    except ImportError as e:
        raise ImportError(
            "load_source needs the converter extra: run `pip install -e '.[converter]'` in the "
            "loaderx checkout"
        ) from e
    path = os.fspath(source)
    if os.path.isdir(path):
        return datasets.load_from_disk(path)  # pyright: ignore[reportUnknownMemberType]
    if path.endswith(".parquet") or path.endswith(".arrow") or os.path.exists(path):
        if not os.path.isfile(path):
            raise errors.StoreNotFoundError(2, "no such file", path)
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq
            from datasets.table import InMemoryTable  # pyright: ignore[reportMissingTypeStubs]

            # pyarrow's stubs leave some of read_table's parameters untyped.
            table = pq.read_table(path, memory_map=True)  # pyright: ignore[reportUnknownMemberType]
            return datasets.Dataset(InMemoryTable(table))
        if path.endswith(".arrow"):
            return datasets.Dataset.from_file(path)
        raise InvalidArgumentError(
            f"{path}: not a save_to_disk directory, a .parquet or an .arrow file"
        )
    return huggingface(path, config=config, revision=revision)
