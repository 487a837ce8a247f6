"""What Dense and Ragged writers share: lifetime, publish, and the checks of
``create``'s arguments."""

from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from .. import _native
from .._schema import (
    MAX_DATA_SHARDS,
    check_codec,
    check_dtype,
    check_int,
    encode_attrs,
    fspath,
)
from ..errors import InvalidArgumentError
from ._reader import ModeError

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import Self


def is_readonly_mapping(a: npt.NDArray[np.generic]) -> bool:
    """True when `a`'s memory is a read-only shared file mapping (np.load with
    mmap_mode='r'), whose consumed pages the writer may drop from memory."""
    base: object = a
    while base is not None:
        if isinstance(base, np.memmap):
            return base.mode == "r"
        if isinstance(base, mmap.mmap):
            return False
        base = getattr(base, "base", None)
    return False


class StoreWriter:
    """What Dense and Ragged writers share: lifetime and publish."""

    def __init__(
        self, native: _native.Writer, path: str, dtype: np.dtype, codec: str, data_shards: int
    ) -> None:
        self._native = native
        self._path = path
        self._dtype = dtype
        self._codec = codec
        self._data_shards = data_shards

    @property
    def path(self) -> str:
        return self._path

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def codec(self) -> str:
        return self._codec

    @property
    def data_shards(self) -> int:
        return self._data_shards

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __len__(self) -> int:
        """Records appended so far."""
        return len(self._native)

    def _check_open(self) -> None:
        if self._native.closed:
            raise InvalidArgumentError(
                f"{self._path}: the writer is closed; a closed writer cannot append"
            )

    def close(self) -> None:
        """Publishes the store atomically: it appears at ``path`` whole, or not at
        all. Either way the writer is closed afterwards, and closing again does
        nothing. ``PublishedNotDurableError`` (a ``StorageError``) means the store
        WAS published and is readable, but syncing its parent directory failed, so
        its directory entry may not survive a crash; any other error means nothing
        was published and the build directory is gone."""
        self._native.close()

    def abort(self) -> None:
        """Discards everything appended; nothing is published."""
        self._native.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _refuse_read(self, *args: object) -> NoReturn:
        raise ModeError(
            f"{self._path}: a writer cannot be read; close() it, then open the published store"
        )

    __getitem__ = _refuse_read
    __iter__ = _refuse_read

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} records appended"
        return f"{type(self).__name__}({self._path!r}, {state})"


def create_args(
    path: str | os.PathLike[str],
    dtype: npt.DTypeLike,
    codec: str,
    data_shards: int,
    dict_bytes: bytes | None,
    attrs: dict[str, Any] | None,
) -> tuple[str, np.dtype, int, bytes | None, bytes | None]:
    p = fspath(path)
    dt = check_dtype(dtype)
    files = check_int(data_shards, "data_shards", 1, MAX_DATA_SHARDS)
    return p, dt, files, check_codec(codec, dict_bytes), encode_attrs(attrs)
