"""The stateless, step-based Sampler.

Every batch is a pure function of ``(length, batch_size, mode, seed, step)``: a run
resumes at any step in O(1) with :meth:`Sampler.seek`, and the same arguments give
the same indices in every process and on every machine. The algorithms are written
down bit for bit in ``docs/sampler.md``.

``next()`` and iteration return the sampler's one reusable ``uint64`` buffer of
shape ``(batch_size,)``: the same memory every draw, overwritten by the next draw.
Copy a batch (``batch.copy()``) only if it must outlive the next draw.
"""

from __future__ import annotations

import enum

from loaderx import _native

__all__ = ["Sampler"]

_LAST_STEP = 2**64 - 1


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
    advances one step; ``seek(step)`` makes the next draw return batch ``step``.

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

        SEQUENTIAL = 0
        IID = 1
        CYCLIC = 2

    def __new__(cls, length: int, batch_size: int, mode: Sampler.Mode, seed: int = 0) -> Sampler:
        if not isinstance(mode, Sampler.Mode):
            raise TypeError(
                f"mode must be a Sampler.Mode (SEQUENTIAL, IID or CYCLIC), got {mode!r}"
            )
        return super().__new__(cls, length, batch_size, mode.value, seed)

    def _config(self) -> tuple[int, int, str, int]:
        """``(length, batch_size, mode name, seed)``: what identifies this sampler's
        sequence of batches (the Loader stores it in its resume state)."""
        length, batch_size, mode, seed, _ = self._state()
        return (length, batch_size, Sampler.Mode(mode).name, seed)

    def __reduce__(self):
        length, batch_size, mode, seed, step = self._state()
        return (type(self), (length, batch_size, Sampler.Mode(mode), seed), step)

    def __setstate__(self, step: int) -> None:
        if step > _LAST_STEP:  # the last step was drawn: restore that condition
            self.seek(_LAST_STEP)
            self.next()
        else:
            self.seek(step)
