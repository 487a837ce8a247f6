"""PackingSampler: steps of token-budget packs of whole records, for training on
variable-length sequences (re-exported from ``loaderx.sampler``). The algorithm
is in ``docs/sampler.md``, section "PackingSampler"."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from . import _native
from ._steps import restore_step
from .errors import InvalidArgumentError
from .sampler import Sampler

__all__ = ["PackingSampler"]

#: Records per window of the CYCLIC and IID plans.
PACK_WINDOW: int = _native.PACK_WINDOW

_LONG = ("truncate", "error")


def _integers(value: object, name: str, what: str) -> npt.NDArray[Any]:
    """`value` as a non-empty one-dimensional integer array, with errors that
    name it; `what` is what one element is ("record", "position")."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of integers, got {type(value).__name__}")
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(
            f"{name} must be a sequence of integers, got {type(value).__name__}"
        ) from None
    # The type first: None or a float is no sequence of integers, whatever its
    # shape (an empty list has no type to tell: it is refused as empty).
    if a.dtype.kind not in "iu" and a.size:
        raise TypeError(f"{name} must be integers, got dtype {a.dtype}")
    if a.ndim != 1:
        raise InvalidArgumentError(f"{name} must be one-dimensional, got shape {a.shape}")
    if a.size == 0:
        raise InvalidArgumentError(f"{name} must hold at least one {what}")
    return a


def _lengths_arg(lengths: object) -> npt.NDArray[np.uint64]:
    """`lengths` as a contiguous uint64 array, with errors that name it."""
    a = _integers(lengths, "lengths", "record")
    if a.dtype.kind == "i":
        negative = np.flatnonzero(a < 0)
        if negative.size:
            i = int(negative[0])
            raise InvalidArgumentError(f"lengths[{i}] is negative ({int(a[i])})")
    return np.ascontiguousarray(a, dtype=np.uint64)


def _positions_arg(positions: object, records: int) -> npt.NDArray[np.uint64]:
    """`positions` as a contiguous uint64 array of positions below `records`."""
    a = _integers(positions, "positions", "position")
    outside = np.flatnonzero((a < 0) | (a >= records))
    if outside.size:
        i = int(outside[0])
        raise InvalidArgumentError(
            f"positions[{i}] is {int(a[i])}, outside the {records} records of lengths"
        )
    return np.ascontiguousarray(a, dtype=np.uint64)


def _restore(
    lengths: npt.NDArray[np.uint64],
    positions: npt.NDArray[np.uint64] | None,
    args: tuple[int, int, int, int, str],
) -> PackingSampler:
    """Unpickles a PackingSampler from the lengths of its items and their positions."""
    budget, per_step, mode, seed, long = args
    self = _native.PackingSampler.__new__(
        PackingSampler, lengths, budget, per_step, mode, seed, long, positions
    )
    return self


class PackingSampler(_native.PackingSampler):
    """PackingSampler(lengths, tokens_per_pack, packs_per_step, mode=Sampler.Mode.CYCLIC,
    seed=0, long="truncate", *, positions=None)

    Draws one step of ``packs_per_step`` packs per call. A pack is a list of whole
    records whose lengths sum to at most ``tokens_per_pack``, a record longer
    than that counting as ``tokens_per_pack``: the consumer keeps its first
    ``tokens_per_pack`` elements. Records are never split between packs.

    ``next()`` returns the step's record positions, pack after pack, as a
    ``uint64`` view of the sampler's reusable buffer (overwritten by the next
    draw); ``pack_offsets`` is then the ``int64`` array of ``packs_per_step + 1``
    offsets into it: pack ``k`` is ``positions[pack_offsets[k]:pack_offsets[k + 1]]``.
    ``pack_offsets`` is the same array object every draw.

    Parameters
    ----------
    lengths:
        Each record's length, a one-dimensional sequence of non-negative integers
        (``Ragged.lengths()`` reads it from a store's index). The sampler keeps
        its own copy.
    tokens_per_pack:
        The token budget of every pack, an integer ``>= 1``.
    packs_per_step:
        Packs per step, an integer ``>= 1``.
    mode:
        A :class:`Sampler.Mode`. All three use one fixed plan of packs computed
        at construction. CYCLIC: every record exactly once per pass, the plan's
        packs in a fresh order each pass, nothing omitted at a pass boundary (a
        step may straddle two passes). IID: packs drawn uniformly with
        replacement, so every record is equally likely. SEQUENTIAL: records in
        position order, packed next-fit.
    seed:
        An integer in ``[0, 2**64 - 1]``.
    long:
        ``"truncate"`` (a record longer than ``tokens_per_pack`` counts as
        ``tokens_per_pack``) or ``"error"`` (such a record is refused here, the
        error naming its position and length).
    positions:
        None (every record once per pass), or the sequence of record positions to
        pack, which may repeat a position: the steps are those of
        ``PackingSampler(lengths[positions], ...)`` with each item ``j`` replaced
        by ``positions[j]``. One pass of a ``MixtureSampler`` (its batches laid
        end to end) packs a mixture in its exact proportions per pass.

    ``seek(step)`` is O(1); iteration never ends; a PackingSampler pickles and
    copies with its next step. Invalid arguments raise
    :class:`loaderx.errors.InvalidArgumentError` (a ``ValueError``) or
    ``TypeError``, naming the argument.
    """

    __slots__ = ()

    def __new__(
        cls,
        lengths: npt.ArrayLike,
        tokens_per_pack: int,
        packs_per_step: int,
        mode: Sampler.Mode = Sampler.Mode.CYCLIC,
        seed: int = 0,
        long: Literal["truncate", "error"] = "truncate",
        *,
        positions: npt.ArrayLike | None = None,
    ) -> PackingSampler:
        if not isinstance(mode, Sampler.Mode):
            raise TypeError(
                f"mode must be a Sampler.Mode (SEQUENTIAL, IID or CYCLIC), got {mode!r}"
            )
        if not isinstance(long, str):
            raise TypeError(f'long must be "truncate" or "error", got {type(long).__name__}')
        if long not in _LONG:
            raise InvalidArgumentError(f'long must be "truncate" or "error", got {long!r}')
        every = _lengths_arg(lengths)
        if positions is None:
            return super().__new__(
                cls, every, tokens_per_pack, packs_per_step, mode.value, seed, long
            )
        chosen = _positions_arg(positions, len(every))
        return super().__new__(
            cls, every[chosen], tokens_per_pack, packs_per_step, mode.value, seed, long, chosen
        )

    @property
    def tokens_per_pack(self) -> int:
        """The token budget of every pack."""
        return self._state()[2]

    @property
    def packs_per_step(self) -> int:
        """Packs per step."""
        return self._state()[3]

    @property
    def packs_per_pass(self) -> int:
        """Packs in the plan: a CYCLIC pass, or SEQUENTIAL's run over every record."""
        return self._plan()[0]

    @property
    def fill(self) -> float:
        """The share of the plan's pack slots that hold tokens:
        ``sum(min(length, tokens_per_pack)) / (packs_per_pass * tokens_per_pack)``."""
        packs, tokens, _ = self._plan()
        return tokens / (packs * self.tokens_per_pack)

    def config(self) -> dict[str, object]:
        """What identifies this sampler's sequence of steps (the Loader stores it in
        its resume state): the record count and the xxh3-64 of the lengths (as
        little-endian uint64s), the budget, packs per step, mode, seed and
        ``long``. With ``positions``, the counts and hashes are those of the
        sequence packed: the lengths ``lengths[positions]`` and the positions."""
        records, digest, budget, per_step, mode, seed, long, _ = self._state()
        packing: dict[str, object] = {"records": records, "lengths_xxh3": f"{digest:016x}"}
        chosen = self._positions_xxh3()
        if chosen is not None:
            packing["positions_xxh3"] = f"{chosen:016x}"
        return {
            "packing": packing,
            "tokens_per_pack": budget,
            "packs_per_step": per_step,
            "mode": Sampler.Mode(mode).name,
            "seed": seed,
            "long": long,
        }

    def __reduce__(self):
        _, _, budget, per_step, mode, seed, long, step = self._state()
        chosen = self._positions()
        if chosen is not None:
            return (_restore, (self._lengths(), chosen, (budget, per_step, mode, seed, long)), step)
        args = (self._lengths(), budget, per_step, Sampler.Mode(mode), seed, long)
        return (type(self), args, step)

    def __setstate__(self, step: int) -> None:
        restore_step(self, step)

    def __repr__(self) -> str:
        records, _, budget, per_step, mode, seed, long, step = self._state()
        chosen = "" if self._positions_xxh3() is None else f", positions=<{records} positions>"
        return (
            f"{type(self).__qualname__}(<{records} lengths>, tokens_per_pack={budget}, "
            f"packs_per_step={per_step}, mode=Sampler.Mode.{Sampler.Mode(mode).name}, "
            f"seed={seed}, long={long!r}{chosen}) at step {step}"
        )
