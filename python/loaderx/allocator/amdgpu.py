"""AMD GPU memory through the HIP runtime.

``Allocator(device=0)`` hands out managed memory of HIP device ``device``: the
device consumes it directly (DLPack device type 10, ``kDLROCM``) and the host may
write it, so a raw gather fills it in place and ``Dense.append`` takes such a
batch back like a host one. Compressed records are decoded in host scratch and
copied in. The CPU refills a released region at once: make the device finish with
a batch (synchronize, or read back a later result) before dropping it
(``docs/allocators.md``). The runtime is found without importing any framework,
in this order: a HIP runtime this process already loaded, ``LOADERX_HIP_LIBRARY``,
``ROCM_PATH`` / ``ROCM_HOME``, a runtime owned by an installed ``rocm-sdk-core`` or
(legacy) ``torch`` package (two different ones are an error: set
``LOADERX_HIP_LIBRARY``), ``/opt/rocm``, then the system loader.
"""

from __future__ import annotations

from . import _runtime
from ._gpu import GpuAllocator


class Allocator(GpuAllocator):
    """Pooled managed memory of one HIP device."""

    _spec = _runtime.HIP
    _api = "hip"


__all__ = ["Allocator"]
