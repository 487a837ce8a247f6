"""Where gathered batches live.

``Allocator`` is the contract every placement implements: ``allocate(nbytes)``
returns an ``Allocation`` (an exclusively owned region with an address, a size and
a DLPack device), released regions return to the allocator's pool, and ``close()``
ends it. Readers create a ``host.Allocator`` lazily on their first read;
``reader.bind(allocator)`` makes a view of the same store whose outputs land in
another allocator's memory. Concrete allocators live in submodules; importing this
package discovers no GPU runtime.
"""

from __future__ import annotations

import abc
from typing import Any


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
    """Hands out exact-size regions and pools released ones."""

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
    def _native(self) -> Any:
        """The native allocator the gather fills into."""
        raise TypeError(
            f"{type(self).__name__} has no native pool: readers gather only into "
            "loaderx's own allocators (host, cuda, amdgpu)"
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Allocation", "Allocator"]
