"""What the GPU allocators share: find the runtime, then pool its memory."""

from __future__ import annotations

from typing import cast

from .. import _native
from .._schema import check_int
from . import _runtime
from ._pooled import DEFAULT_IDLE_LIMIT, PooledAllocator, check_idle_limit


class GpuAllocator(PooledAllocator):
    _spec: _runtime.RuntimeSpec
    _api: str

    def __init__(self, device: int = 0, *, idle_limit: int = DEFAULT_IDLE_LIMIT) -> None:
        device = check_int(device, "device", 0, 2**31 - 1)
        idle_limit = check_idle_limit(idle_limit)
        library = _runtime.find(self._spec)
        super().__init__(_native.Placement.device(self._api, library, device, idle_limit))

    @property
    def library(self) -> str:
        """The runtime library this allocator loaded."""
        # Only host placements have no library.
        return cast(str, self._pool.library)
