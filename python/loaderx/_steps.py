"""Restoring a step-based sampler's position after unpickling."""

from __future__ import annotations

from typing import Protocol

from . import _native

LAST_STEP: int = _native.SAMPLER_LAST_STEP


class _Seekable(Protocol):
    def seek(self, step: int) -> object: ...
    def next(self) -> object: ...


def restore_step(sampler: _Seekable, step: int) -> None:
    """Puts an unpickled sampler at `step`, its pickled next step; one past the
    last step means the last step was drawn, a condition only a draw restores."""
    if step > LAST_STEP:
        sampler.seek(LAST_STEP)
        sampler.next()
    else:
        sampler.seek(step)
