"""NVIDIA GPU memory through the CUDA runtime.

``Allocator(device=0)`` hands out device memory of CUDA device ``device`` (DLPack
device type 2, ``kDLCUDA``). The host cannot address it, so a gather fills a
pooled pinned host region and the runtime copies it to the device allocation
before the batch is returned; consumers receive it on the device with no further
copy. The copy runs on the legacy default stream; a consumer computing on its own
non-blocking stream must synchronize it before dropping a batch, whose region the
next gather may refill (``docs/allocators.md``). The runtime is found without
importing any framework, in this order: a CUDA runtime this process already
loaded, ``LOADERX_CUDA_LIBRARY``, ``CUDA_HOME`` / ``CUDA_PATH``, a runtime owned
by an installed ``nvidia-cuda-runtime`` or ``torch`` package (two different ones
are an error: set ``LOADERX_CUDA_LIBRARY``), then the system loader.
"""

from __future__ import annotations

from . import _runtime
from ._gpu import GpuAllocator


class Allocator(GpuAllocator):
    """Pooled device memory of one CUDA device."""

    _spec = _runtime.CUDA
    _api = "cuda"


__all__ = ["Allocator"]
