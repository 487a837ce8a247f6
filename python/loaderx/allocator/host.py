"""Pooled, 64-byte aligned host memory."""

from __future__ import annotations

from .. import _native
from .._schema import check_int
from ._pooled import DEFAULT_IDLE_LIMIT, PooledAllocator, Stats


class Allocator(PooledAllocator):
    """Host memory from a pool of size classes, 64-byte aligned."""

    def __init__(self, *, idle_limit: int = DEFAULT_IDLE_LIMIT) -> None:
        super().__init__(_native.Allocator.host(check_int(idle_limit, "idle_limit", 0, 2**63 - 1)))


__all__ = ["Allocator", "Stats"]
