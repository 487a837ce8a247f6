"""Arrow arrays and types as ``convert`` reads them. Which kind an array is
follows from its Arrow type, which convert checks before it narrows to one of
these protocols."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from .._extras import require_extra

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa
    from datasets import (  # pyright: ignore[reportMissingTypeStubs]
        Dataset,
    )
    from typing_extensions import Self


class Array(Protocol):
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


class ListArray(Array, Protocol):
    """A list, large list or fixed-size list array."""

    @property
    def offsets(self) -> Array: ...
    def flatten(self) -> Array: ...


class StructArray(Array, Protocol):
    @property
    def type(self) -> pa.StructType: ...
    def flatten(self) -> list[Array]: ...


class ExtensionArray(Array, Protocol):
    """datasets' ArrayND columns, whose storage is nested lists."""

    @property
    def storage(self) -> Array: ...


def require_pyarrow() -> None:
    """Imports pyarrow, or says which extra provides it."""
    require_extra("pyarrow.compute", "convert needs pyarrow and datasets", "converter")


def is_number(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)


def field_types(fields: pa.StructType | pa.Schema) -> dict[str, pa.DataType]:
    """The type of each field of a struct type or schema, by name, in order."""
    # pyarrow's stubs leave the type of a field's type open.
    return {f.name: f.type for f in cast("Iterable[pa.Field[pa.DataType]]", fields)}


def value_type(t: pa.DataType) -> pa.DataType:
    """The element type of a list, large list or fixed-size list type."""
    return cast("pa.ListType[pa.DataType]", t).value_type


def is_list(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def is_bytes(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def is_string(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def arrow_numpy_dtype(t: pa.DataType) -> np.dtype:
    return np.dtype(t.to_pandas_dtype())


def array_dims(t: pa.ExtensionType) -> tuple[tuple[int | None, ...], pa.DataType]:
    """The declared shape and the storage of datasets' Array2D..Array5D."""
    shape = cast("tuple[int | None, ...]", getattr(t, "shape", ()))
    return tuple(shape), t.storage_type


def nested_dims(t: pa.DataType) -> tuple[tuple[int | None, ...], pa.DataType]:
    """The length of each list level (None when undeclared) and the leaf type."""
    import pyarrow as pa

    dims: list[int | None] = []
    if isinstance(t, pa.ExtensionType) and hasattr(t, "shape"):
        declared, storage = array_dims(t)
        # The storage is one list level per declared dimension.
        _, leaf = nested_dims(storage)
        return declared, leaf
    while is_list(t):
        dims.append(t.list_size if pa.types.is_fixed_size_list(t) else None)
        t = value_type(t)
    return tuple(dims), t


def one_chunk(table: pa.Table, column: str) -> list[Array]:
    """A batch's column as one Arrow array: a dataset saved by datasets holds
    chunks of 1,000 rows, and one append per batch costs less than one per chunk."""
    import pyarrow as pa

    chunks = table.column(column).chunks
    if len(chunks) <= 1:
        return cast("list[Array]", chunks)
    return [cast(Array, pa.concat_arrays(chunks))]


def batches(dataset: Dataset, rows: int) -> Iterator[pa.Table]:
    """The dataset's rows as Arrow tables of at most `rows` rows, in order."""
    # datasets leaves the type of format arguments open; its "arrow" format yields
    # pyarrow Tables.
    arrow = dataset.with_format("arrow")  # pyright: ignore[reportUnknownMemberType]
    yield from cast("Iterator[pa.Table]", arrow.iter(batch_size=rows))
