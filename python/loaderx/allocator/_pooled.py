"""What every allocator shares: regions from a native pool."""

from __future__ import annotations

from typing import NamedTuple

from .. import _native
from .._schema import check_int
from ..errors import InvalidArgumentError
from . import Allocation
from . import Allocator as _Base

# What a pool keeps of released regions before it frees them instead.
DEFAULT_IDLE_LIMIT: int = _native.DEFAULT_IDLE_LIMIT


def check_idle_limit(idle_limit: object) -> int:
    """`idle_limit` as bytes a pool may keep idle: an integer the pool can count."""
    return check_int(idle_limit, "idle_limit", 0, 2**63 - 1)


class Stats(NamedTuple):
    live: int
    """Allocations in use (by batches, DLPack consumers or Allocation objects)."""
    live_bytes: int
    idle_bytes: int
    """Released bytes kept for reuse."""


class PooledAllocation(Allocation):
    __slots__ = ("_a",)

    def __init__(self, native: _native.Allocation) -> None:
        self._a = native

    @property
    def address(self) -> int:
        return self._a.address

    @property
    def size(self) -> int:
        return self._a.size

    @property
    def device(self) -> tuple[int, int]:
        return self._a.device


class PooledAllocator(_Base):
    """Regions from a pool of size classes. Regions are handed out exactly once
    while live; a released region is reused by the next request of its size
    class, which keeps repeated batch sizes free of fresh page faults and runtime
    calls."""

    def __init__(self, pool: _native.Allocator, idle_limit: int) -> None:
        self._pool = pool
        self._idle_limit = idle_limit

    def allocate(self, nbytes: int) -> PooledAllocation:
        if self.closed:
            raise InvalidArgumentError("the allocator is closed")
        n = check_int(nbytes, "nbytes", 0)
        if n >= 2**64:  # the native side refuses sizes too large for memory, up to here
            raise InvalidArgumentError(f"nbytes {n} is too large for any allocation")
        return PooledAllocation(self._pool.allocate(n))

    @property
    def idle_limit(self) -> int:
        """Bytes of released regions the pool keeps for reuse before freeing them."""
        return self._idle_limit

    def _check_picklable(self) -> None:
        # A pickle names a pool to create in the receiving process; a closed one
        # names nothing that could still be used.
        if self.closed:
            raise InvalidArgumentError(
                "the allocator is closed; a closed allocator cannot be pickled"
            )

    def stats(self) -> Stats:
        return Stats(*self._pool.stats())

    @property
    def device(self) -> tuple[int, int]:
        """The DLPack ``(device_type, device_id)`` of the memory it hands out."""
        return self._pool.dl_device

    def close(self) -> None:
        self._pool.close()

    @property
    def closed(self) -> bool:
        return self._pool.closed

    @property
    def _native(self) -> _native.Allocator:
        if self.closed:
            raise InvalidArgumentError("the allocator is closed")
        return self._pool

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"{type(self).__module__.rsplit('.', 1)[-1]}.Allocator(device={self.device}, "
            f"live={s.live}, live_bytes={s.live_bytes}, idle={s.idle_bytes})"
        )
