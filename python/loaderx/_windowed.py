"""WindowedSampler: locality-aware shuffling of a store's records, a window of
blocks at a time (re-exported from ``loaderx.sampler``). The algorithm is in
``docs/sampler.md``, section "WINDOWED"."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from . import _native
from ._steps import restore_step
from .errors import InvalidArgumentError

__all__ = ["SizedStore", "WindowedSampler"]

#: The bytes a window spans by default (256 MiB).
DEFAULT_WINDOW_BYTES: int = _native.DEFAULT_WINDOW_BYTES
#: The block the groups of records are sized to: the remote block cache's.
BLOCK_BYTES: int = _native.DEFAULT_CACHE_BLOCK_BYTES


@runtime_checkable
class SizedStore(Protocol):
    """What a WindowedSampler is sized from: a reader of ``len(reader)`` records
    whose data files hold ``data_file_sizes`` bytes (both known at open, without
    reading the index), as ``loaderx.zrecord`` readers are, local or remote. An
    ``index_bytes`` attribute, where the reader has one (``loaderx.zrecord``
    readers do), counts the index too; without it the index counts 0."""

    def __len__(self) -> int: ...

    @property
    def data_file_sizes(self) -> Sequence[int]: ...


def _store_sizes(reader: object) -> tuple[int, int, int]:
    """`(records, data bytes, index bytes)` of `reader`, or an error naming the
    argument."""
    if not isinstance(reader, SizedStore):
        raise TypeError(
            "reader must be a store reader with len() and data_file_sizes "
            f"(a loaderx.zrecord Dense or Ragged reader), got {type(reader).__name__}"
        )
    length = len(reader)
    if length < 1:
        raise InvalidArgumentError("reader must hold at least 1 record, it holds 0")
    try:
        sizes = list(reader.data_file_sizes)
    except TypeError:
        sizes = None
    if sizes is None or not all(_is_int(s) for s in sizes):
        raise TypeError(
            f"reader's data_file_sizes must be integers, got {reader.data_file_sizes!r}"
        )
    data = sum(int(s) for s in sizes)
    if any(int(s) < 0 for s in sizes) or data > _MOST:
        raise InvalidArgumentError(
            f"reader's data_file_sizes must be integers >= 0 summing to at most 2**64 - 1, "
            f"got {sizes!r}"
        )
    index = getattr(reader, "index_bytes", 0)
    if not _is_int(index):
        raise TypeError(f"reader's index_bytes must be an integer, got {index!r}")
    if not 0 <= int(index) <= _MOST:
        raise InvalidArgumentError(
            f"reader's index_bytes must be an integer in [0, 2**64 - 1], got {index!r}"
        )
    return length, data, int(index)


_MOST = 2**64 - 1


def _is_int(x: object) -> bool:
    """An integer, as the sampler's arguments take them: not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


class WindowedSampler(_native.WindowedSampler):
    """WindowedSampler(reader, batch_size, *, seed=0, window_bytes=256 * 2**20)

    Draws one batch of ``batch_size`` positions of ``reader``'s records per step,
    shuffled at the scale of windows of about ``window_bytes`` of the store (its
    index entries and its data): each
    pass visits the windows (runs of consecutive records) in a fresh order and the
    records of each window in a fresh order, so that every pass returns every
    record exactly once and reads each block of the store about once. A batch may
    straddle two passes; nothing is omitted.

    Parameters
    ----------
    reader:
        A ``loaderx.zrecord`` reader (local or remote), or any object with
        ``len()`` (at least 1) and ``data_file_sizes`` (and ``index_bytes``, if
        it has one). Only its record count, data bytes and index bytes are used,
        all known at open; nothing is read.
    batch_size:
        Positions per batch, an integer ``>= 1`` (it may exceed the record count).
    seed:
        An integer in ``[0, 2**64 - 1]``.
    window_bytes:
        The bytes of the store (index and data) one window spans, about: an
        integer ``>= 1``. Windows are whole groups of records whose entries and
        data fill about one cache block (1 MiB), at least one group.

    ``next()``, iteration, ``seek(step)`` (O(1)), pickling and ``config()`` behave
    as for :class:`loaderx.sampler.Sampler`; ``batch_size`` is readable. Invalid
    arguments raise :class:`loaderx.errors.InvalidArgumentError` (a
    ``ValueError``) or ``TypeError``, with a message that names the argument.
    """

    __slots__ = ()

    def __new__(
        cls,
        reader: SizedStore,
        batch_size: int,
        *,
        seed: int = 0,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
    ) -> WindowedSampler:
        length, data_bytes, index_bytes = _store_sizes(reader)
        return super().__new__(
            cls, length, data_bytes, index_bytes, BLOCK_BYTES, window_bytes, batch_size, seed
        )

    @classmethod
    def from_sizes(
        cls,
        length: int,
        data_bytes: int,
        batch_size: int,
        *,
        seed: int = 0,
        window_bytes: int = DEFAULT_WINDOW_BYTES,
        block_bytes: int = BLOCK_BYTES,
        index_bytes: int = 0,
    ) -> WindowedSampler:
        """The sampler of a store of ``length`` records (``>= 1``) holding
        ``data_bytes`` bytes of data and ``index_bytes`` of index (both
        ``>= 0``), with groups sized to ``block_bytes`` (``>= 1``): what
        ``WindowedSampler(reader, ...)`` builds from the reader."""
        return super().__new__(
            cls, length, data_bytes, index_bytes, block_bytes, window_bytes, batch_size, seed
        )

    @property
    def batch_size(self) -> int:
        """Positions per batch."""
        return self._state()[5]

    @property
    def window_records(self) -> int:
        """Consecutive positions per window (the last window may hold fewer)."""
        return self._geometry()[1]

    @property
    def windows(self) -> int:
        """Windows per pass."""
        return self._geometry()[2]

    def config(self) -> dict[str, object]:
        """What identifies this sampler's sequence of batches (the Loader stores it
        in its resume state)."""
        length, data_bytes, index_bytes, block_bytes, window_bytes, batch_size, seed, _ = (
            self._state()
        )
        return {
            "windowed": length,
            "data_bytes": data_bytes,
            "index_bytes": index_bytes,
            "block_bytes": block_bytes,
            "window_bytes": window_bytes,
            "batch_size": batch_size,
            "seed": seed,
        }

    def __reduce__(self):
        length, data_bytes, index_bytes, block_bytes, window_bytes, batch_size, seed, step = (
            self._state()
        )
        args = (type(self), length, data_bytes, index_bytes, block_bytes, window_bytes)
        return (_rebuild, (*args, batch_size, seed), step)

    def __setstate__(self, step: int) -> None:
        restore_step(self, step)

    def __repr__(self) -> str:
        length, data_bytes, index_bytes, block_bytes, window_bytes, batch_size, seed, step = (
            self._state()
        )
        return (
            f"{type(self).__qualname__}(length={length}, data_bytes={data_bytes}, "
            f"index_bytes={index_bytes}, batch_size={batch_size}, seed={seed}, "
            f"window_bytes={window_bytes}, block_bytes={block_bytes}) at step {step}"
        )


def _rebuild(
    cls: type[WindowedSampler],
    length: int,
    data_bytes: int,
    index_bytes: int,
    block_bytes: int,
    window_bytes: int,
    batch_size: int,
    seed: int,
) -> WindowedSampler:
    return cls.from_sizes(
        length,
        data_bytes,
        batch_size,
        seed=seed,
        window_bytes=window_bytes,
        block_bytes=block_bytes,
        index_bytes=index_bytes,
    )
