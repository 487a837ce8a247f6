"""The stateless, step-based samplers: Sampler, MixtureSampler and WindowedSampler.

Every batch is a pure function of ``(length, batch_size, mode, seed, step)``: a run
resumes at any step in O(1) with :meth:`Sampler.seek`, and the same arguments give
the same indices in every process and on every machine. The algorithms are written
down bit for bit in ``docs/sampler.md``.

``next()`` and iteration return the sampler's one reusable ``uint64`` buffer of
shape ``(batch_size,)``: the same memory every draw, overwritten by the next draw.
Copy a batch (``batch.copy()``) only if it must outlive the next draw.

:class:`MixtureSampler` draws each batch from several position ranges in given
proportions, with the same contract; its algorithm is in ``docs/loader.md``,
section "Mixtures".

:class:`WindowedSampler` shuffles a store's records a window of about
``window_bytes`` at a time, so that a pass reads each block of the store about
once; its algorithm is in ``docs/sampler.md``, section "WINDOWED".

:class:`PackingSampler` draws steps of token-budget packs of whole records from
their lengths; its algorithm is in ``docs/sampler.md``, section "PackingSampler".
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, SupportsFloat, SupportsIndex

from loaderx import _native
from loaderx._steps import restore_step
from loaderx._windowed import WindowedSampler
from loaderx.errors import InvalidArgumentError

__all__ = ["MixtureSampler", "PackingSampler", "Sampler", "WindowedSampler"]

if TYPE_CHECKING:
    from loaderx._packing_sampler import PackingSampler

# Each mode's code, as the native kernels number them.
_MODE_CODE = {name: code for code, name in enumerate(_native.SAMPLER_MODES)}


class Sampler(_native.Sampler):
    """Sampler(length, batch_size, mode, seed=0)

    Draws one batch of ``batch_size`` record positions in ``[0, length)`` per step.

    Parameters
    ----------
    length:
        Number of records, an integer ``>= 1`` (up to ``2**64 - 1``).
    batch_size:
        Indices per batch, an integer ``>= 1``. In CYCLIC mode it must not exceed
        ``length`` (a cycle would contain no full batch): ``ValueError``.
    mode:
        A :class:`Sampler.Mode`.
    seed:
        An integer in ``[0, 2**64 - 1]``.

    Methods: ``next()`` (also ``next(sampler)`` and ``for batch in sampler``, which
    never ends) returns the reusable buffer filled with the current step's batch and
    advances one step; ``seek(step)`` makes the next draw return batch ``step``;
    ``config()`` names the sequence of batches for the Loader's resume state.
    ``batch_size`` is readable.

    A Sampler is meant for one consumer thread; concurrent draws from several
    threads on the same object are not supported.
    """

    __slots__ = ()

    class Mode(enum.Enum):
        """How each batch is drawn.

        SEQUENTIAL
            Positions ``(step * batch_size + i) % length``: in order, wrapping at the end.
        IID
            Uniform with replacement (counter-based SplitMix64 stream).
        CYCLIC
            A fresh keyed permutation of ``range(length)`` per cycle, without a
            length-sized allocation. Each cycle yields ``length // batch_size`` full
            batches and omits a different remainder of ``length % batch_size``
            positions. Requires ``batch_size <= length``.
        """

        SEQUENTIAL = _MODE_CODE["SEQUENTIAL"]
        IID = _MODE_CODE["IID"]
        CYCLIC = _MODE_CODE["CYCLIC"]

    def __new__(cls, length: int, batch_size: int, mode: Sampler.Mode, seed: int = 0) -> Sampler:
        if not isinstance(mode, Sampler.Mode):
            raise TypeError(
                f"mode must be a Sampler.Mode (SEQUENTIAL, IID or CYCLIC), got {mode!r}"
            )
        return super().__new__(cls, length, batch_size, mode.value, seed)

    @property
    def batch_size(self) -> int:
        """Positions per batch."""
        return self._state()[1]

    def config(self) -> tuple[int, int, str, int]:
        """``(length, batch_size, mode name, seed)``: what identifies this sampler's
        sequence of batches (the Loader stores it in its resume state)."""
        length, batch_size, mode, seed, _ = self._state()
        return (length, batch_size, Sampler.Mode(mode).name, seed)

    def __reduce__(self):
        length, batch_size, mode, seed, step = self._state()
        return (type(self), (length, batch_size, Sampler.Mode(mode), seed), step)

    def __setstate__(self, step: int) -> None:
        restore_step(self, step)


class MixtureSampler(_native.MixtureSampler):
    """MixtureSampler(ranges, weights, batch_size, mode=Sampler.Mode.IID, seed=0)

    Draws one batch of ``batch_size`` positions per step from several ranges of
    positions, each range supplying its share ``weight / sum(weights)`` of the
    slots: exactly, over every ``W`` consecutive slots (``W`` the total of the
    integer weights), and to within a few slots at any point in between.

    Parameters
    ----------
    ranges:
        A sequence of ``(start, stop)`` pairs of positions, each the half-open
        range ``[start, stop)``: non-empty, pairwise disjoint, in any order (a
        concatenated store's parts, or several corpora in one store). For parts of
        given lengths laid end to end, see :meth:`from_lengths`.
    weights:
        One non-negative weight per range, not all zero; only their ratios count.
        Integers are exact. If any weight is not an integer, every weight is taken
        as a float and converted exactly to an integer (the largest scaled into
        ``[2**46, 2**47)``, rounded to nearest). A range of weight 0 is never drawn.
    batch_size:
        Positions per batch, an integer in ``[1, 2**32 - 1]``.
    mode:
        How each range is traversed: one :class:`Sampler.Mode` for all ranges, or
        a sequence with one per range. SEQUENTIAL walks the range in order, IID
        draws uniformly with replacement, CYCLIC visits every position of the
        range once per pass, in a fresh permutation each pass.
    seed:
        An integer in ``[0, 2**64 - 1]``.

    ``next()``, iteration and ``seek(step)`` behave as for :class:`Sampler`;
    ``batch_size`` is readable. Invalid arguments raise
    :class:`loaderx.errors.InvalidArgumentError` (a ``ValueError``) or
    ``TypeError``, with a message that names the argument.
    """

    __slots__ = ()

    def __new__(
        cls,
        ranges: Sequence[tuple[int, int]],
        weights: Sequence[SupportsFloat | SupportsIndex],
        batch_size: int,
        mode: Sampler.Mode | Sequence[Sampler.Mode] = Sampler.Mode.IID,
        seed: int = 0,
    ) -> MixtureSampler:
        try:
            ranges = list(ranges)
        except TypeError:
            raise TypeError(
                f"ranges must be a sequence of (start, stop) pairs, got {type(ranges).__name__}"
            ) from None
        if isinstance(mode, Sampler.Mode):
            modes = [mode] * len(ranges)
        elif isinstance(mode, Sequence) and all(isinstance(m, Sampler.Mode) for m in mode):
            modes = list(mode)
        else:
            raise TypeError(
                f"mode must be a Sampler.Mode or a sequence of them, one per range; got {mode!r}"
            )
        return super().__new__(cls, ranges, weights, batch_size, [m.value for m in modes], seed)

    @classmethod
    def from_lengths(
        cls,
        lengths: Sequence[int],
        weights: Sequence[SupportsFloat | SupportsIndex],
        batch_size: int,
        mode: Sampler.Mode | Sequence[Sampler.Mode] = Sampler.Mode.IID,
        seed: int = 0,
    ) -> MixtureSampler:
        """The mixture of parts of the given lengths (integers ``>= 1``) laid end
        to end from position 0: part ``i`` is ``[sum(lengths[:i]), sum(lengths[:i + 1]))``,
        as in a store that ``loaderx.zrecord.concat`` made from parts of these
        lengths."""
        ranges: list[tuple[int, int]] = []
        start = 0
        for i, length in enumerate(lengths):
            if isinstance(length, bool) or not isinstance(length, SupportsIndex):
                raise TypeError(f"lengths[{i}] must be an integer, got {type(length).__name__}")
            if length.__index__() < 1:
                raise InvalidArgumentError(f"lengths[{i}] must be at least 1, got {length}")
            ranges.append((start, start + length.__index__()))
            start += length.__index__()
        return cls(ranges, weights, batch_size, mode, seed)

    @property
    def batch_size(self) -> int:
        """Positions per batch."""
        return self._state()[2]

    def config(self) -> dict[str, object]:
        """What identifies this sampler's sequence of batches (the Loader stores it
        in its resume state): the ranges, the integer weights, the batch size, each
        range's mode name and the seed."""
        ranges, weights, batch_size, modes, seed, _ = self._state()
        return {
            "mixture": [list(r) for r in ranges],
            "weights": weights,
            "batch_size": batch_size,
            "modes": [Sampler.Mode(m).name for m in modes],
            "seed": seed,
        }

    def __reduce__(self):
        ranges, weights, batch_size, modes, seed, step = self._state()
        return (
            type(self),
            (ranges, weights, batch_size, [Sampler.Mode(m) for m in modes], seed),
            step,
        )

    def __setstate__(self, step: int) -> None:
        restore_step(self, step)

    def __repr__(self) -> str:
        ranges, weights, batch_size, modes, seed, step = self._state()
        names = [Sampler.Mode(m).name for m in modes]
        mode = f"Sampler.Mode.{names[0]}" if len(set(names)) == 1 else repr(names)
        return (
            f"{type(self).__qualname__}(ranges={ranges!r}, weights={weights!r}, "
            f"batch_size={batch_size}, mode={mode}, seed={seed}) at step {step}"
        )


def __getattr__(name: str) -> object:
    # PackingSampler's module imports this one (for Sampler.Mode), so it is
    # imported on first use rather than here.
    if name == "PackingSampler":
        from loaderx._packing_sampler import PackingSampler

        return PackingSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
