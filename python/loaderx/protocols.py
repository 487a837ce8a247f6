"""What the Loader accepts: structural types for readers and samplers.

``loaderx.zrecord.Dense`` and ``Ragged`` readers (and their ``bind`` views) are
readers, and ``loaderx.sampler.Sampler`` is a sampler, but any object with the
same methods works: the Loader only calls what these protocols name. The
optional capabilities are separate protocols, checked with ``isinstance`` when
the Loader needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = [
    "ConfiguredSampler",
    "IndexSampler",
    "PackedSampler",
    "Positions",
    "PrefetchingReader",
    "Reader",
    "SeekableSampler",
    "SizedSampler",
]

Positions = npt.NDArray[np.int64] | npt.NDArray[np.uint64]
"""What a reader's ``gather`` receives: a one-dimensional, C-contiguous array of
record positions. It may be a view of the sampler's reused buffer, valid only
until ``gather`` returns."""

Batch_co = TypeVar("Batch_co", covariant=True)


@runtime_checkable
class Reader(Protocol[Batch_co]):
    """One binding of a stream: a store of ``len(reader)`` records that returns
    the records at the given positions, in that order, as one batch.

    A reader may also name the store it reads, for the Loader's resume state:
    an ``identity`` attribute, else a ``header_checksum`` one, holding an
    ``int``, a ``str`` or ``bytes`` (recorded as lowercase hex) that differs
    between stores with different records. A reader with neither is recorded as
    ``None``, which matches only ``None``."""

    def __len__(self) -> int: ...

    def gather(self, positions: Positions, /) -> Batch_co: ...


@runtime_checkable
class PrefetchingReader(Reader[Batch_co], Protocol):
    """A reader that can start a gather before its batch is needed.

    ``prefetch(positions)`` starts reading the records (a remote store sends its
    requests) and returns at once: either a function that waits for them and
    returns the batch ``gather(positions)`` would, or None when the reader has
    nothing to wait for (a local store), and then the Loader calls ``gather``.
    It copies what it needs of `positions` before it returns, since they may be
    a view of the sampler's buffer.

    When a step's readers return functions, a Loader worker begins the following
    steps too, up to ``workers + prefetch`` steps ahead of the consumer, so that
    their reads wait at the same time instead of one after another. A function
    with a ``cancel()`` method has it called when the Loader closes while a
    thread waits in it, which should make that wait end (by raising) at once."""

    def prefetch(self, positions: Positions, /) -> Callable[[], Batch_co] | None: ...


@runtime_checkable
class IndexSampler(Protocol):
    """Draws one global batch of record positions per call.

    ``next()`` returns a one-dimensional array of integer positions. It may be
    the same buffer every call, overwritten by the next draw: the Loader gathers
    from it before it draws again."""

    def next(self) -> npt.NDArray[np.integer]: ...


@runtime_checkable
class SeekableSampler(IndexSampler, Protocol):
    """A sampler that can resume: after ``seek(step)`` the next draw returns batch
    ``step``. ``Loader.load_state_dict`` needs it to resume at a step above 0."""

    def seek(self, step: int, /) -> None: ...


@runtime_checkable
class SizedSampler(IndexSampler, Protocol):
    """A sampler whose batch size is known before its first draw, so the Loader
    checks at construction that the batch divides by the bindings."""

    @property
    def batch_size(self) -> int: ...


@runtime_checkable
class PackedSampler(IndexSampler, Protocol):
    """A sampler whose steps are packs of records (``loaderx.sampler.PackingSampler``).

    After each ``next()``, ``pack_offsets`` is a one-dimensional integer array of
    ``packs + 1`` offsets into the positions it returned, rising from 0 to their
    count: pack ``k`` is ``positions[pack_offsets[k]:pack_offsets[k + 1]]``. It
    may be the same array every draw, overwritten by the next one.
    ``packs_per_step`` is the number of packs, known before the first draw. The
    Loader then splits each step by whole packs instead of by record count."""

    @property
    def pack_offsets(self) -> npt.NDArray[np.integer]: ...

    @property
    def packs_per_step(self) -> int: ...


@runtime_checkable
class ConfiguredSampler(IndexSampler, Protocol):
    """A sampler that names its sequence of batches.

    ``config()`` returns JSON data (``dict`` with ``str`` keys, ``list``,
    ``tuple``, ``str``, ``int``, ``bool`` or ``None``) that differs between
    samplers whose sequences differ: ``loaderx.sampler.Sampler`` returns
    ``(length, batch_size, mode name, seed)``. The Loader stores it in its resume
    state and refuses a state taken with another."""

    def config(self) -> object: ...
