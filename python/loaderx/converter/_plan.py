"""Planning: which store each column becomes, from its Arrow type and its
``datasets`` feature, or why it cannot be stored and what to do instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

import numpy as np

from ..errors import InvalidArgumentError
from ._arrow import (
    arrow_numpy_dtype,
    field_types,
    is_bytes,
    is_number,
    is_string,
    nested_dims,
    value_type,
)
from ._report import Layout

if TYPE_CHECKING:
    import pyarrow as pa


# Features whose Arrow storage is {bytes, path}: one encoded file per row.
FILE_FEATURES = ("Image", "Audio", "Video", "Pdf", "Nifti", "Mesh", "BioSequence", "BioStructure")


@dataclass
class Plan:
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
    # The option that gave a Dense shape (an engine's shapes=), None when the
    # first record gives it.
    shape_option: str | None = None

    def __post_init__(self) -> None:
        if self.source in ("nested", "struct", "number"):
            if self.kind == "ragged":
                self.ndim = len(self.dims)
            elif all(d is not None for d in self.dims):
                self.shape = tuple(cast("tuple[int, ...]", self.dims))
        elif self.source in ("bytes", "file"):
            self.ndim = 1


class Refused(Exception):
    """One column convert cannot store, and what to do instead."""


class BadRecord(InvalidArgumentError):
    """A record that does not fit its column's plan; the message names it."""


def leaf_advice(column: str, leaf: pa.DataType, utf8: bool) -> str:
    if is_string(leaf):
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


def class_names(feature: object) -> tuple[str, ...] | None:
    """The class names of a ClassLabel feature, or of one inside lists."""
    while True:
        name = type(feature).__name__
        if name == "ClassLabel":
            return tuple(cast("list[str]", getattr(feature, "names", [])))
        if name in ("List", "LargeList", "Sequence"):
            feature = getattr(feature, "feature", None)
            continue
        return None


def plan_column(
    column: str,
    t: pa.DataType,
    feature: object,
    *,
    decode: Layout | None,
    dense: bool,
    utf8: bool,
) -> Plan:
    """The plan for one column, or Refused saying why and what to do instead."""
    import pyarrow as pa

    fname = type(feature).__name__
    frepr = repr(feature) if feature is not None else str(t)
    if fname in FILE_FEATURES:
        if decode is not None:
            if fname == "Audio":
                rate = cast("int | None", getattr(feature, "sampling_rate", None))
                return Plan(column, decode, "audio", None, feature=frepr, sampling_rate=rate)
            if fname != "Image":
                raise Refused(
                    f"decode applies to Image and Audio columns; {fname} files are stored "
                    f"as their encoded bytes (leave {column!r} out of decode=), or map them "
                    "to arrays with Dataset.map"
                )
            mode = cast("str | None", getattr(feature, "mode", None))
            return Plan(column, decode, "image", None, feature=frepr, image_mode=mode)
        return Plan(column, "ragged", "file", np.dtype(np.uint8), (None,), frepr)
    if decode is not None:
        raise Refused(f"decode= applies to Image and Audio columns, and {column!r} is {frepr}")
    if fname == "Json" or (isinstance(t, pa.ExtensionType) and not hasattr(t, "shape")):
        raise Refused(f"{frepr} values cannot be stored; map them to numbers or bytes first")
    if pa.types.is_null(t):
        raise Refused("it holds only nulls; drop it with Dataset.remove_columns")
    if is_string(t):
        if utf8:
            return Plan(column, "ragged", "bytes", np.dtype(np.uint8), (None,), frepr)
        raise Refused(leaf_advice(column, t, False))
    if utf8:
        raise Refused(f"utf8= applies to string columns, and {column!r} is {frepr}")
    if is_bytes(t):
        return Plan(column, "ragged", "bytes", np.dtype(np.uint8), (None,), frepr)
    if pa.types.is_struct(t):
        fields = field_types(t)
        if sorted(fields) == ["shape", "values"]:
            values, shape_t = fields["values"], fields["shape"]
            if (
                (pa.types.is_list(values) or pa.types.is_large_list(values))
                and is_number(value_type(values))
                and pa.types.is_fixed_size_list(shape_t)
                and pa.types.is_uint64(value_type(shape_t))
                and shape_t.list_size >= 1
            ):
                if dense:
                    raise Refused("dense= applies to lists, not {values, shape} structs")
                dims: tuple[int | None, ...] = (None,) * shape_t.list_size
                return Plan(
                    column, "ragged", "struct", arrow_numpy_dtype(value_type(values)), dims, frepr
                )
        raise Refused(
            f"a struct of fields {list(fields)} is not one array; store each field as its "
            "own column (Dataset.flatten), or as {values: list<number>, "
            "shape: fixed_size_list<uint64, ndim>} for a multidimensional record"
        )
    dims, leaf = nested_dims(t)
    if type(leaf_feature(feature)).__name__ in FILE_FEATURES:
        raise Refused(
            "lists of encoded files are not one array; give each file its own row "
            "(Dataset.map with batched=True) to store one record per file"
        )
    if not is_number(leaf):
        raise Refused(leaf_advice(column, leaf, False))
    names = class_names(feature)
    dtype = arrow_numpy_dtype(leaf)
    if all(d is not None for d in dims):
        if dense:
            raise Refused(f"dense= is for lists of undeclared length; {frepr} is already Dense")
        return Plan(column, "dense", "number" if not dims else "nested", dtype, dims, frepr, names)
    if dense:
        # The item shape comes from the first record; every other must match it.
        return Plan(column, "dense", "nested", dtype, dims, frepr, names)
    return Plan(column, "ragged", "nested", dtype, dims, frepr, names)


def leaf_feature(feature: object) -> object:
    while type(feature).__name__ in ("List", "LargeList", "Sequence"):
        feature = getattr(feature, "feature", None)
    return feature
