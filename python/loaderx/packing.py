"""From a packed step's records to what a language model consumes.

A :class:`loaderx.sampler.PackingSampler` step is a list of packs, each a list of
whole records of at most ``tokens_per_pack`` tokens in total (a longer record
counts as, and is cut to, its first ``tokens_per_pack`` tokens). Gathering the
step's positions from a Ragged store gives one :class:`~loaderx.zrecord.RaggedBatch`;
with the step's ``pack_offsets`` these functions lay it out:

* :func:`to_dense`: fixed-shape ``(packs, tokens_per_pack)`` arrays of tokens,
  segment ids and positions, for attention masked by segment;
* :func:`cu_seqlens`: the flat tokens with int32 ``cu_seqlens`` of the (cut)
  records and each pack's start, for variable-length attention kernels.

Both are vectorised NumPy (a fixed number of array operations, none per record)
and read host memory: a batch gathered into device memory is refused.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from ._schema import check_int
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .zrecord import RaggedBatch

__all__ = ["cu_seqlens", "to_dense"]

# Offsets are int32, as cu_seqlens are everywhere in loaderx.
_MAX_TOKENS = 2**31 - 1


class _Layout(NamedTuple):
    values: npt.NDArray[np.generic]
    kept: npt.NDArray[np.int64]  # tokens kept of each record
    starts: npt.NDArray[np.int64]  # each record's first element in values
    before: npt.NDArray[np.int64]  # kept tokens of the records before each one
    offsets: npt.NDArray[np.int64]  # the pack offsets, checked


def _layout(batch: RaggedBatch, pack_offsets: npt.ArrayLike, budget: int) -> _Layout:
    from .zrecord import RaggedBatch

    if not isinstance(batch, RaggedBatch):
        raise TypeError(f"batch must be a RaggedBatch, got {type(batch).__name__}")
    if batch.ndim != 1:
        raise InvalidArgumentError(
            f"packing lays out one-dimensional records; the batch's records have ndim {batch.ndim}"
        )
    try:
        values = np.from_dlpack(batch.values)
        cu = np.from_dlpack(batch.cu_seqlens).astype(np.int64)
    except (BufferError, RuntimeError, TypeError) as e:
        raise InvalidArgumentError(
            f"packing reads the batch on the host; this batch is not host memory ({e})"
        ) from None
    n = len(cu) - 1
    offsets = np.asarray(pack_offsets)
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) < 1:
        raise InvalidArgumentError(
            "pack_offsets must be a one-dimensional integer array of packs + 1 offsets, "
            f"got {offsets.dtype} of shape {offsets.shape}"
        )
    offsets = offsets.astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != n or (np.diff(offsets) < 0).any():
        raise InvalidArgumentError(
            f"pack_offsets must rise from 0 to the batch's {n} records, got {offsets.tolist()}"
        )
    kept = np.minimum(np.diff(cu), budget)
    before = np.zeros(n + 1, np.int64)
    np.cumsum(kept, out=before[1:])
    per_pack = before[offsets[1:]] - before[offsets[:-1]]
    over = np.flatnonzero(per_pack > budget)
    if over.size:
        k = int(over[0])
        raise InvalidArgumentError(
            f"pack {k} holds {int(per_pack[k])} tokens after cutting each record to "
            f"tokens_per_pack, over tokens_per_pack ({budget})"
        )
    if before[-1] > _MAX_TOKENS:
        raise InvalidArgumentError(f"{int(before[-1])} tokens overflow int32 offsets")
    return _Layout(values, kept, cu[:-1], before, offsets)


def _budget(tokens_per_pack: int) -> int:
    return check_int(tokens_per_pack, "tokens_per_pack", 1, _MAX_TOKENS)


def _pad(pad: object, dtype: np.dtype) -> npt.NDArray[np.generic]:
    """`pad` as a 0-d array of `dtype`, which must hold it: an integer (or a
    float of integral value) in range for an integer dtype, any real for a
    floating dtype (rounded to it, but not past its range), any number for a
    complex one, a bool or 0 or 1 for bool. Nothing is cut or wrapped."""
    if not isinstance(pad, numbers.Number):
        raise TypeError(f"pad must be a number, got {type(pad).__name__}")
    kind = dtype.kind
    if isinstance(pad, (bool, np.bool_)):
        fits = kind == "b"
    elif isinstance(pad, numbers.Real) and kind in "iub":
        value = float(pad)
        whole = math.isfinite(value) and value.is_integer()
        # An integer as itself: a float of a large one has lost its low digits.
        exact = int(pad) if isinstance(pad, numbers.Integral) else int(value) if whole else 0
        if kind == "b":
            fits = whole and exact in (0, 1)
        else:
            info = np.iinfo(dtype)
            fits = whole and info.min <= exact <= info.max
    elif isinstance(pad, numbers.Real) and kind in "fc":
        fits = not math.isfinite(pad) or abs(float(pad)) <= float(np.finfo(dtype).max)
    else:
        fits = kind == "c"
    if not fits:
        raise InvalidArgumentError(f"pad must be a value of the batch's dtype {dtype}, got {pad!r}")
    return np.asarray(pad).astype(dtype)


def to_dense(
    batch: RaggedBatch,
    pack_offsets: npt.ArrayLike,
    tokens_per_pack: int,
    pad: int | float = 0,
) -> dict[str, npt.NDArray[np.generic]]:
    """The packs of `batch` as ``(packs, tokens_per_pack)`` arrays.

    `batch` is a host RaggedBatch of one-dimensional records and `pack_offsets`
    its ``packs + 1`` offsets (pack ``k`` is records ``pack_offsets[k]`` to
    ``pack_offsets[k + 1]``), as a PackingSampler step gives them for one
    binding. Each record keeps its first ``tokens_per_pack`` tokens; a pack's
    records are laid out in order from column 0, and the rest of the row is
    padding. Returns a dict of

    * ``tokens``: the batch's dtype, `pad` in padding;
    * ``segment_ids``: int32, 1, 2, ... for the records of each pack in order, 0
      in padding;
    * ``positions``: int32, each token's 0-based position in its record, 0 in
      padding.

    A pack whose records hold more than ``tokens_per_pack`` tokens in total
    (after the cut) is an :class:`~loaderx.errors.InvalidArgumentError`, as are
    offsets that do not rise from 0 to ``len(batch)`` and a `pad` the batch's
    dtype cannot hold (1.5 or -1 for uint8: nothing is cut or wrapped); a `pad`
    that is not a number is a ``TypeError``.
    """
    budget = _budget(tokens_per_pack)
    lay = _layout(batch, pack_offsets, budget)
    packs = len(lay.offsets) - 1
    sizes = np.diff(lay.offsets)
    pack_of = np.repeat(np.arange(packs, dtype=np.int64), sizes)
    first_record = np.repeat(lay.offsets[:-1], sizes)
    # Each kept token's record, its place in the record, and its slot in the flat
    # (packs * tokens_per_pack) output: its pack's row, after the kept tokens of
    # the pack's earlier records.
    record = np.repeat(np.arange(len(lay.kept), dtype=np.int64), lay.kept)
    within = np.arange(int(lay.before[-1]), dtype=np.int64) - lay.before[record]
    row_start = pack_of * budget + lay.before[:-1] - lay.before[first_record]
    slot = row_start[record] + within
    tokens = np.full(packs * budget, _pad(pad, lay.values.dtype), dtype=lay.values.dtype)
    tokens[slot] = lay.values[lay.starts[record] + within]
    segment_ids = np.zeros(packs * budget, np.int32)
    segment_ids[slot] = record - first_record[record] + 1
    positions = np.zeros(packs * budget, np.int32)
    positions[slot] = within
    shape = (packs, budget)
    return {
        "tokens": tokens.reshape(shape),
        "segment_ids": segment_ids.reshape(shape),
        "positions": positions.reshape(shape),
    }


def cu_seqlens(
    batch: RaggedBatch, pack_offsets: npt.ArrayLike, tokens_per_pack: int
) -> dict[str, npt.NDArray[np.generic]]:
    """The packs of `batch` for variable-length attention.

    Arguments as for :func:`to_dense`. Returns a dict of

    * ``tokens``: every record's first ``tokens_per_pack`` tokens, record after
      record, in the batch's dtype (the batch's own values, not a copy, when no
      record was cut);
    * ``cu_seqlens``: int32, ``len(batch) + 1`` offsets of the (cut) records in
      ``tokens``, from 0;
    * ``pack_starts``: int32, ``packs + 1`` offsets of each pack's first token in
      ``tokens`` (``cu_seqlens[pack_offsets]``), so that pack ``k`` is
      ``tokens[pack_starts[k]:pack_starts[k + 1]]``.
    """
    budget = _budget(tokens_per_pack)
    lay = _layout(batch, pack_offsets, budget)
    total = int(lay.before[-1])
    lengths = lay.kept
    if len(lengths) and lay.starts[0] == 0 and (np.diff(lay.starts) == lengths[:-1]).all():
        # No record but perhaps the last was cut, and they lie end to end from 0.
        tokens = lay.values[:total]
    else:
        record = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        within = np.arange(total, dtype=np.int64) - lay.before[record]
        tokens = lay.values[lay.starts[record] + within]
    cu = lay.before.astype(np.int32)
    return {"tokens": tokens, "cu_seqlens": cu, "pack_starts": cu[lay.offsets]}
