"""Pooled, 64-byte aligned host memory."""

from __future__ import annotations

from .. import _native
from ._pooled import DEFAULT_IDLE_LIMIT, PooledAllocator, Stats, check_idle_limit


class Allocator(PooledAllocator):
    """Host memory from a pool of size classes, 64-byte aligned."""

    def __init__(self, *, idle_limit: int = DEFAULT_IDLE_LIMIT) -> None:
        super().__init__(_native.Placement.host(check_idle_limit(idle_limit)))


__all__ = ["Allocator", "Stats"]
