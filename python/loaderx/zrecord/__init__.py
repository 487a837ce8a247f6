"""Zrecord: immutable, typed, ordered record containers.

A creator (``Dense.create`` / ``Ragged.create``) consumes records in append order
and ``close()`` publishes one immutable directory. Readers (``Dense.open`` /
``Ragged.open``, or ``open`` for a store of either kind) gather any positions
into one fresh output returned through DLPack: ``DLTensor`` for Dense,
``RaggedBatch`` for Ragged.

Positions are sequence positions ``0..len-1``. Negative integers are refused with
``IndexError`` rather than counted from the end: a position is a record's identity,
and a wrapped ``-1`` would silently name a different record. Slices follow Python's
slice rules (``ds[-3:]`` is the last three records) because a slice names a range,
not an identity.
"""

from __future__ import annotations

from .. import _native, errors
from ._dense import Dense, DenseWriter
from ._keys import SupportsDLPack
from ._options import StorageOptions
from ._ragged import Ragged, RaggedBatch, RaggedWriter
from ._reader import ModeError, RecordSizes, StoreStats, Traffic
from ._reader import reopen_reader as _reopen_reader
from ._remote import Cache
from ._remote import Remote as _Remote
from ._tools import ConcatResult, clean, concat, open, upload

__all__ = [
    "Cache",
    "ConcatResult",
    "DLTensor",
    "Dense",
    "DenseWriter",
    "ModeError",
    "Ragged",
    "RaggedBatch",
    "RaggedWriter",
    "RecordSizes",
    "StorageOptions",
    "StoreStats",
    "SupportsDLPack",
    "Traffic",
    "ZrecordError",
    "clean",
    "concat",
    "open",
    "upload",
]

DLTensor = _native.DLTensor
ZrecordError = errors.ZrecordError
DLTensor.__doc__ = """A DLPack-only view of a gathered batch or record.

Consume it with ``np.from_dlpack(t)`` (shares memory), ``torch.from_dlpack(t)`` or
``jax.dlpack.from_dlpack(t)``. It has ``shape``, ``dtype``, ``ndim``, ``nbytes`` and
``device`` (the ``__dlpack_device__()`` pair), and deliberately no ``__array__``.

A tensor in host memory also has NumPy's ``__array_interface__``, so
``np.asarray(t)``, ``jnp.asarray(t)`` and ``torch.as_tensor(t)`` take it too
(NumPy shares its memory). NumPy's DLPack import knows neither ``bfloat16`` nor
the float8 types; ``np.asarray(t)`` gives them as ml_dtypes arrays. A tensor in
device memory has no interface: reading ``__array_interface__`` is a TypeError
saying to use the framework's ``from_dlpack``.
"""

# Every name is this module's, as users import it: pickles record classes and
# functions by their module, and a reader's pickle names Dense or Ragged, then
# loaderx.zrecord._reopen_reader and (remote) loaderx.zrecord._Remote, as every
# version before this package was split wrote them.
for _public in (
    Cache,
    ConcatResult,
    Dense,
    DenseWriter,
    ModeError,
    Ragged,
    RaggedBatch,
    RaggedWriter,
    RecordSizes,
    StorageOptions,
    StoreStats,
    SupportsDLPack,
    Traffic,
    clean,
    concat,
    open,
    upload,
):
    _public.__module__ = __name__
for _private, _name in ((_reopen_reader, "_reopen_reader"), (_Remote, "_Remote")):
    _private.__module__ = __name__
    _private.__qualname__ = _private.__name__ = _name
del _public, _private, _name
