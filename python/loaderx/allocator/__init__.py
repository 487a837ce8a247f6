"""Where gathered batches live.

``Allocator`` is what loaderx's allocators (``host``, ``cuda`` and ``amdgpu``)
have in common: ``allocate(nbytes)`` returns an ``Allocation`` (an exclusively
owned region with an address, a size and a DLPack device), released regions
return to the allocator's pool, and ``close()`` ends it. Readers create a
``host.Allocator`` lazily on their first read; ``reader.bind(allocator)`` makes a
view of the same store whose outputs land in another allocator's memory.

It is not an extension point: a read fills the native pool behind one of those
three allocators directly, so no Python method of a subclass would take part, and
a subclass defined outside loaderx is a TypeError. The concrete allocators live in
submodules; importing this package discovers no GPU runtime.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Self

    from .._native import Allocator as NativeAllocator


class Allocation(abc.ABC):
    """An exclusively owned region. It stays valid while anything that uses it
    (this object, a DLTensor or RaggedBatch over it, or a DLPack consumer of
    those) is alive, then returns to its allocator."""

    @property
    @abc.abstractmethod
    def address(self) -> int: ...

    @property
    @abc.abstractmethod
    def size(self) -> int: ...

    @property
    @abc.abstractmethod
    def device(self) -> tuple[int, int]:
        """The DLPack ``(device_type, device_id)`` of the region."""


class Allocator(abc.ABC):
    """Hands out exact-size regions and pools released ones. Only loaderx defines
    allocators: subclassing one elsewhere raises TypeError."""

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        if cls.__module__ != "loaderx" and not cls.__module__.startswith("loaderx."):
            raise TypeError(
                f"{cls.__name__} cannot subclass a loaderx allocator: readers gather only "
                "into loaderx's own allocators (host, cuda, amdgpu), filling their native "
                "pools directly, so a subclass's methods would never see a read"
            )

    @abc.abstractmethod
    def allocate(self, nbytes: int) -> Allocation: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Frees pooled regions and refuses further requests. Regions still in
        use stay valid and are freed when their last user releases them."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool: ...

    @property
    @abc.abstractmethod
    def _native(self) -> NativeAllocator:
        """The native pool a gather fills."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Allocation", "Allocator"]
