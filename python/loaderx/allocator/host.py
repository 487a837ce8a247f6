"""Pooled, 64-byte aligned host memory."""

from __future__ import annotations

from .. import _native
from ._pooled import DEFAULT_IDLE_LIMIT, PooledAllocator, Stats, check_idle_limit


class Allocator(PooledAllocator):
    """Host memory from a pool of size classes, 64-byte aligned.

    It pickles by configuration: unpickling creates a fresh, empty pool with the
    same idle limit in the receiving process, since memory cannot move between
    processes."""

    def __init__(self, *, idle_limit: int = DEFAULT_IDLE_LIMIT) -> None:
        limit = check_idle_limit(idle_limit)
        super().__init__(_native.Allocator.host(limit), limit)

    def __reduce__(self) -> tuple[object, tuple[int]]:
        self._check_picklable()
        return (_reopen, (self._idle_limit,))


def _reopen(idle_limit: int) -> Allocator:
    return Allocator(idle_limit=idle_limit)


__all__ = ["Allocator", "Stats"]
