"""What a reader's ``[]`` takes: a key turned into one position or an array of
positions, checked against the store's length."""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, SupportsIndex, TypeAlias, cast

import numpy as np

from .. import _native
from .._host import host_array
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import CapsuleType


class SupportsDLPack(Protocol):
    """An array a consumer imports with ``__dlpack__`` (NumPy, torch, JAX...)."""

    def __dlpack__(self, *, stream: None = None) -> CapsuleType: ...


if TYPE_CHECKING:
    from ..protocols import Positions

    # SupportsDLPack and SupportsIndex: other frameworks' integer arrays and scalars.
    Key: TypeAlias = (
        int
        | np.integer
        | slice
        | range
        | Sequence[int | np.integer]
        | npt.NDArray[np.integer]
        | SupportsDLPack
        | SupportsIndex
    )


def _position(i: int, n: int) -> int:
    if i < 0 or i >= n:
        raise _native.out_of_range(i, n)
    return i


def _foreign_array(key: object) -> npt.NDArray[np.generic] | None:
    """A NumPy view of another framework's array (torch, JAX, CuPy...), found by
    protocol so that no framework is imported; None when `key` is none."""
    if hasattr(key, "__dlpack__"):
        return np.asarray(host_array(key, "positions"))
    if hasattr(key, "__array__"):
        return np.asarray(key)
    return None


def positions(key: object, n: int) -> int | Positions:
    """An int for a single position, or a 1-D int64/uint64 array for a batch."""
    if isinstance(key, numbers.Integral) and not isinstance(key, (bool, np.bool_)):
        return _position(int(key), n)
    if isinstance(key, slice):
        return np.arange(*key.indices(n), dtype=np.int64)
    if isinstance(key, range):
        return np.arange(key.start, key.stop, key.step, dtype=np.int64)
    foreign = None if isinstance(key, (np.ndarray, tuple, list)) else _foreign_array(key)
    if isinstance(key, np.ndarray) or foreign is not None:
        arr = cast("npt.NDArray[np.generic]", key if foreign is None else foreign)
        if arr.ndim == 0 and arr.dtype.kind in "iu":
            # A 0-d integer array is one position, as a NumPy integer is.
            return _position(int(arr), n)
    elif isinstance(key, (tuple, list)):
        seq = cast("Sequence[object]", key)
        if len(seq) == 0:
            return np.empty(0, dtype=np.int64)
        if not all(
            isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_)) for k in seq
        ):
            raise TypeError("positions must be integers")
        ints = cast("Sequence[int]", seq)  # Integral, by the check above
        try:
            arr = np.asarray(ints, dtype=np.int64)
        except OverflowError:
            big = next(int(k) for k in ints if not -(2**63) <= int(k) < 2**63)
            raise _native.out_of_range(big, n) from None
    elif hasattr(key, "__index__") and type(key) not in (bool, np.bool_):
        return _position(operator.index(cast(SupportsIndex, key)), n)
    else:
        raise TypeError(
            "a store is indexed by an int, a slice or a collection of ints, "
            f"not {type(key).__name__}"
        )
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return np.empty(0, dtype=np.int64)
        raise TypeError(f"positions must be integers, got an array of {arr.dtype}")
    if arr.ndim != 1:
        raise InvalidArgumentError(f"positions must be one-dimensional, got shape {arr.shape}")
    if arr.dtype != np.int64 and arr.dtype != np.uint64:
        arr = arr.astype(np.int64)
    return cast("Positions", np.ascontiguousarray(arr))  # int64 or uint64 by now
