"""Records from Arrow chunks: a stacked array for a Dense column, a packed
RaggedBatch for a Ragged one, every record checked against its column's plan."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np

from ..errors import InvalidArgumentError
from ..zrecord import RaggedBatch
from ..zrecord._ragged import MAX_ELEMENTS
from ._arrow import Array, ExtensionArray, ListArray, StructArray, field_types
from ._decode import decode_audio, decode_image
from ._files import read_regular_file
from ._plan import BadRecord, Plan

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa


#: Rows per Arrow batch read from the dataset; a Ragged batch whose elements
#: overflow int32 cu_seqlens is split further.
BATCH_ROWS = 4096


#: Rows decoded at a time for ``decode=``: decoded pixels are much larger than
#: their files.
DECODE_ROWS = 64


Records: TypeAlias = "npt.NDArray[np.generic] | RaggedBatch"


def _no_nulls(arr: Array, plan: Plan, row0: int) -> None:
    if arr.null_count:
        raise BadRecord(
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
    arr: Array, plan: Plan, row0: int
) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The leaf values of a chunk of (nested) lists, each record's element offsets
    into them, and each record's shape, checked to be a regular array."""
    import pyarrow as pa

    n = len(arr)
    if isinstance(arr.type, pa.ExtensionType):
        arr = cast("ExtensionArray", arr).storage
    starts = np.arange(n + 1, dtype=np.int64)
    shapes = np.empty((n, len(plan.dims)), dtype=np.int64)
    for level, declared in enumerate(plan.dims):
        _no_nulls(arr, plan, row0)
        lists = cast("ListArray", arr)
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
                raise BadRecord(
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
    arr: Array,
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


def _fields(arr: Array) -> dict[str, Array]:
    """A struct array's children, sliced like the struct."""
    struct = cast("StructArray", arr)
    return dict(zip(field_types(struct.type), struct.flatten(), strict=True))


def _files(arr: Array, plan: Plan, row0: int) -> list[bytes]:
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
            raise BadRecord(f"column {plan.column!r}: row {row0 + r} has neither bytes nor a path")
        try:
            out.append(read_regular_file(cast(str, p), MAX_ELEMENTS))
        except OSError as e:
            raise BadRecord(
                f"column {plan.column!r}: row {row0 + r} refers to the file {p!r}, which "
                f"cannot be read ({e.strerror}); embed the files first (Dataset.map with "
                "the feature's decode=False keeps them as bytes)"
            ) from None
    return out


def _agree(plan: Plan, dtype: np.dtype, shape: tuple[int, ...], row: int) -> None:
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
        raise BadRecord(
            f"column {plan.column!r}: row {row} decodes to {dtype}, earlier rows to "
            f"{plan.dtype}; {fix}"
        )
    if plan.kind == "ragged" and len(shape) != plan.ndim:
        raise BadRecord(
            f"column {plan.column!r}: row {row} has {len(shape)} dimensions, earlier rows "
            f"{plan.ndim}; {fix}"
        )
    if plan.kind == "dense" and shape != plan.shape:
        what = "file's length and channels" if audio else "image's size"
        redo = "trim or pad them" if audio else "resize them"
        raise BadRecord(
            f"column {plan.column!r}: row {row} has shape {shape}, earlier rows "
            f"{plan.shape}; a Dense store holds one shape: use decode={{{plan.column!r}: "
            f"'ragged'}} to keep each {what}, or {redo} with Dataset.map"
        )


def _same_shape(plan: Plan, shapes: npt.NDArray[np.int64], row0: int) -> tuple[int, ...]:
    """The one item shape of a Dense column read from lists, checked on every row."""
    if plan.shape is None:
        plan.shape = tuple(int(d) for d in shapes[0])
    differ = np.flatnonzero((shapes != np.asarray(plan.shape, dtype=np.int64)).any(axis=1))
    if len(differ):
        r = int(differ[0])
        got = tuple(shapes[r].tolist())
        if plan.shape_option is not None:
            raise BadRecord(
                f"column {plan.column!r}: row {row0 + r} has shape {got}, but "
                f"{plan.shape_option} gives {plan.shape}"
            )
        raise BadRecord(
            f"column {plan.column!r}: row {row0 + r} has shape {got}, "
            f"row 0 {plan.shape}; a Dense store holds one shape: leave {plan.column!r} out "
            "of dense= to store each record with its own shape (Ragged)"
        )
    return plan.shape


def _row_of(i: int, starts: npt.NDArray[np.int64] | None) -> int:
    """The record holding element `i` of a chunk's values (`starts`: each record's
    first element, None when there is one element per record)."""
    return i if starts is None else int(np.searchsorted(starts, i, side="right")) - 1


def _check_labels(
    values: npt.NDArray[np.generic],
    plan: Plan,
    row0: int,
    starts: npt.NDArray[np.int64] | None,
) -> None:
    """Refuses a ClassLabel value that names no class: one of 0..n-1 for n names,
    or -1, which datasets uses for a row without a label."""
    if plan.class_names is None or not len(values):
        return
    n = len(plan.class_names)
    ints = values.astype(np.int64, copy=False)
    bad = np.flatnonzero((ints < -1) | (ints >= n))
    if len(bad):
        i = int(bad[0])
        raise BadRecord(
            f"column {plan.column!r}: row {row0 + _row_of(i, starts)} holds {int(ints[i])}, "
            f"which is not a class of its ClassLabel (0..{n - 1} for its {n} names, or -1 "
            "for no label); fix the value, or declare the names it stands for"
        )


def _cast(
    values: npt.NDArray[np.generic],
    plan: Plan,
    row0: int,
    starts: npt.NDArray[np.int64] | None,
) -> npt.NDArray[np.generic]:
    """`values` in the dtype dtypes= asked for. Integers and booleans must keep
    their value exactly; floats narrowed to a smaller float are rounded, which is
    what asking for it means, but a finite value too large for the narrower type
    (which would become infinity) is refused."""
    if plan.cast_from is None:
        return values
    assert plan.dtype is not None
    # Overflow is found below and reported with its row, not as NumPy's warning.
    with np.errstate(all="ignore"):
        out = values.astype(plan.dtype)
        if plan.cast_from.kind in "biu":
            changed = np.flatnonzero(out.astype(plan.cast_from) != values)
        else:
            changed = np.flatnonzero(np.isinf(out) & np.isfinite(values))
    if len(changed):
        i = int(changed[0])
        why = (
            f"{plan.dtype} cannot hold exactly ({out[i].item()!r})"
            if plan.cast_from.kind in "biu"
            else f"is beyond the range of {plan.dtype} (it would become {out[i].item()!r})"
        )
        raise BadRecord(
            f"column {plan.column!r}: row {row0 + _row_of(i, starts)} holds "
            f"{values[i].item()!r}, which {why}; ask dtypes= for a wider type"
        )
    return out


def _chunk(arr: Array, plan: Plan, row0: int) -> Records:
    """The records of one Arrow chunk: a stacked array for Dense, a RaggedBatch
    for Ragged."""
    n = len(arr)
    _no_nulls(arr, plan, row0)
    if plan.source == "number":
        assert plan.dtype is not None
        values = arr.to_numpy(zero_copy_only=False)
        _check_labels(values, plan, row0, None)
        values = _cast(values, plan, row0, None)
        return np.ascontiguousarray(values, plan.dtype)
    if plan.source == "nested":
        values, starts, shapes = _nested(arr, plan, row0)
        _check_labels(values, plan, row0, starts)
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
            fields["values"], Plan(plan.column, "ragged", "nested", plan.dtype, (None,)), row0
        )
        values = _cast(values, plan, row0, starts)
        shape_plan = Plan(plan.column, "dense", "nested", np.dtype(np.uint64), (plan.ndim,))
        shape_values, _, _ = _nested(fields["shape"], shape_plan, row0)
        shapes = shape_values.astype(np.int64).reshape(n, plan.ndim)
        sizes = np.prod(shapes, axis=1)
        bad = np.flatnonzero(sizes != np.diff(starts))
        if len(bad):
            r = int(bad[0])
            raise BadRecord(
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
    decode = decode_audio if plan.source == "audio" else decode_image
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


def _ragged(
    values: npt.NDArray[np.generic],
    starts: npt.NDArray[np.int64],
    shapes: npt.NDArray[np.int64],
    dtype: np.dtype,
) -> RaggedBatch:
    if int(starts[-1]) > MAX_ELEMENTS:
        raise _TooBig
    return RaggedBatch(
        np.ascontiguousarray(values, dtype),
        starts.astype(np.int32),
        np.ascontiguousarray(shapes, np.uint64),
    )


def records_of(arr: Array, plan: Plan, row0: int) -> Iterator[tuple[int, Records]]:
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
            yield from records_of(piece.slice(0, half), plan, row0 + lo)
            yield from records_of(piece.slice(half), plan, row0 + lo + half)


def nbytes(records: Records) -> int:
    if isinstance(records, RaggedBatch):
        return int(np.from_dlpack(records.values).nbytes)
    return int(records.nbytes)
