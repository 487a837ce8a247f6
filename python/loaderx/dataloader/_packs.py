"""A packed step's split by whole packs: this process's packs, divided evenly
between its bindings, and each binding's pack offsets relative to its records."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..errors import InvalidArgumentError
from ._process import split_description


class PackSplit(NamedTuple):
    """This process's part of a packed step."""

    #: This process's positions are ``positions[start:stop]`` of the step's.
    start: int
    stop: int
    #: Binding ``i`` gets ``positions[bounds[i]:bounds[i + 1]]``, relative to ``start``.
    bounds: list[int]
    #: Per binding, its packs' offsets into its own records (read-only int64,
    #: from 0 to its record count).
    offsets: tuple[npt.NDArray[np.int64], ...]


def pack_offsets(drawn: object, count: int) -> npt.NDArray[np.int64]:
    """The sampler's `pack_offsets` after a draw of `count` positions, checked,
    as a new int64 array (the sampler overwrites its own at the next draw)."""
    a = np.asarray(drawn)
    if a.ndim != 1 or a.dtype.kind not in "iu" or len(a) < 2:
        raise InvalidArgumentError(
            "the sampler's pack_offsets must be a one-dimensional integer array of "
            f"packs + 1 offsets, got {a.dtype} of shape {a.shape}"
        )
    if a.dtype.kind == "u" and int(a.max()) > count:
        raise InvalidArgumentError(
            f"the sampler's pack_offsets go past its step's {count} positions"
        )
    offsets = a.astype(np.int64)  # a copy, also when it is int64 already
    if offsets[0] != 0 or offsets[-1] != count or (np.diff(offsets) < 0).any():
        raise InvalidArgumentError(
            f"the sampler's pack_offsets must rise from 0 to its step's {count} positions, "
            f"got {_shown(offsets)}"
        )
    return offsets


def _shown(offsets: npt.NDArray[np.int64]) -> str:
    if len(offsets) <= 12:
        return str(offsets.tolist())
    return f"[{', '.join(map(str, offsets[:6].tolist()))}, ..., {offsets[-1]}] ({len(offsets)})"


def split_packs(
    offsets: npt.NDArray[np.int64], process_index: int, process_count: int, bindings: int
) -> PackSplit:
    """Process `process_index` of `process_count` gets the contiguous packs
    ``[p * S / n, (p + 1) * S / n)`` of the step's ``S`` packs, and its binding
    ``i`` the packs ``[i * S / (n * k), (i + 1) * S / (n * k))`` of those; each
    gets whole packs, so the records of a pack always stay together."""
    packs = len(offsets) - 1
    if packs % (process_count * bindings):
        raise InvalidArgumentError(
            f"the sampler's step of {packs} packs does not divide by "
            f"{split_description(process_count, bindings)}"
        )
    per = packs // (process_count * bindings)
    first = process_index * per * bindings
    mine = offsets[first : first + per * bindings + 1]
    start = int(mine[0])
    bounds = (mine[::per] - start).tolist()
    parts: list[npt.NDArray[np.int64]] = []
    for i in range(bindings):
        part = mine[i * per : (i + 1) * per + 1] - mine[i * per]
        part.flags.writeable = False
        parts.append(part)
    return PackSplit(start, int(mine[-1]), bounds, tuple(parts))
