"""loaderx: typed, immutable on-disk record containers (``loaderx.zrecord``) and a
stateless, resumable data loader (``loaderx.sampler``, ``loaderx.dataloader``).

The main names are here too: ``Dense``, ``Ragged``, ``RaggedBatch``, ``DLTensor``,
``Loader``, ``Sampler``, ``MixtureSampler`` and every exception of
``loaderx.errors``. The first seven are imported on first use, so
``import loaderx`` loads neither NumPy nor the native extension.

``set_threads(n)`` and ``thread_count()`` set and read how many threads work on
one read, write, gather or verify (docs/loader.md, "Threads").
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from . import errors
from .errors import *  # noqa: F403 - the exceptions are part of the top-level API

if TYPE_CHECKING:
    from .dataloader import Loader
    from .sampler import MixtureSampler, Sampler
    from .zrecord import Dense, DLTensor, Ragged, RaggedBatch

try:
    __version__ = version("loaderx")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

# Each lazily imported name and the module that defines it.
_LAZY = {
    "DLTensor": "zrecord",
    "Dense": "zrecord",
    "Ragged": "zrecord",
    "RaggedBatch": "zrecord",
    "Loader": "dataloader",
    "Sampler": "sampler",
    "MixtureSampler": "sampler",
}

__all__ = [
    "DLTensor",
    "Dense",
    "Loader",
    "MixtureSampler",
    "Ragged",
    "RaggedBatch",
    "Sampler",
    "__version__",
    "set_threads",
    "thread_count",
]
__all__ += errors.__all__


def set_threads(n: int) -> None:
    """Sets how many threads work on one read, write, gather or verify, the
    calling thread included (1 runs every call on its caller alone), for this
    process from the next call on; it overrides the ``LOADERX_NUM_THREADS``
    environment variable. A call already running keeps its threads.
    ``InvalidArgumentError`` outside ``1..=1024``, ``TypeError`` for a
    non-integer."""
    import operator

    from . import _native

    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"the thread count must be an integer, got {type(n).__name__}")
    _native.set_threads(operator.index(n))


def thread_count() -> int:
    """How many threads work on one read, write, gather or verify, the calling
    thread included: what ``set_threads`` set, else ``LOADERX_NUM_THREADS``, else
    the processors this process may use."""
    from . import _native

    return _native.thread_count()


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'loaderx' has no attribute {name!r}")
    value: object = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
