"""What the GPU allocators share: find the runtime, then pool its memory."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

from .. import _native, errors
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
        self._open(library, device, idle_limit)

    def _open(self, library: str, device: int, idle_limit: int) -> None:
        pool = _native.Allocator.device(self._api, library, device, idle_limit)
        PooledAllocator.__init__(self, pool, idle_limit)
        self._device = device

    @property
    def library(self) -> str:
        """The runtime library this allocator loaded."""
        # Only host allocators have no library.
        return cast(str, self._pool.library)

    def __reduce__(
        self,
    ) -> tuple[Callable[[type[GpuAllocator], str, int, int], GpuAllocator], tuple[object, ...]]:
        # By configuration: the receiving process opens its own pool on the same
        # device, through the runtime library this one loaded, so that both
        # processes use the same runtime even where discovery could pick another.
        self._check_picklable()
        return (_reopen, (type(self), self.library, self._device, self._idle_limit))


def _reopen(cls: type[GpuAllocator], library: str, device: int, idle_limit: int) -> GpuAllocator:
    allocator = cls.__new__(cls)
    name = f"{cls.__module__.rsplit('.', 1)[-1]}.Allocator(device={device})"
    try:
        allocator._open(library, device, idle_limit)  # pyright: ignore[reportPrivateUsage]
    except Exception as e:
        raise errors.DeviceError(
            f"cannot reopen the pickled {name} in process {os.getpid()} through {library}: "
            f"{e} (a process forked after its parent used the GPU cannot use it: start "
            "such processes with the spawn or forkserver start method)"
        ) from e
    return allocator
