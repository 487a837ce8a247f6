"""Ragged stores: variable-shape records of one dtype and ndim >= 1, and the
packed batch they read and write."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np

from .. import _native
from .._host import host_array
from .._schema import check_dtype, check_int
from ..errors import InvalidArgumentError
from ._reader import StoreReader
from ._writer import StoreWriter, create_args, is_readonly_mapping

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa
    from typing_extensions import Self

    from .._host import HostArray
    from ..protocols import Positions
    from ._dense import ArraySource

DLTensor = _native.DLTensor

# The most elements one packed batch holds (its offsets are int32 cu_seqlens).
MAX_ELEMENTS: int = _native.MAX_RAGGED_ELEMENTS


def _as_dltensor(a: HostArray) -> DLTensor:
    return a if isinstance(a, DLTensor) else DLTensor._from_array(a)  # pyright: ignore[reportPrivateUsage]


_NOT_ONE_TENSOR = (
    "a RaggedBatch is not one tensor: import its packed elements with "
    "from_dlpack(batch.values) (with batch.cu_seqlens and batch.shapes), or each "
    "record with batch.to_tensors()"
)


class RaggedBatch:
    """A packed batch of variable-shape records of one dtype and ndim.

    ``values`` holds every record's elements laid end to end, ``cu_seqlens`` the
    ``n + 1`` int32 element offsets (starting at 0) and ``shapes`` the ``(n, ndim)``
    uint64 record shapes. Reads return the three as DLTensors sharing one
    allocation; the same object is what ``Ragged.append`` takes. Arrays passed to the
    constructor are wrapped as DLTensors without copying."""

    __slots__ = ("values", "cu_seqlens", "shapes", "_from_readonly_mapping")

    values: DLTensor
    cu_seqlens: DLTensor
    shapes: DLTensor
    _from_readonly_mapping: bool

    def __init__(self, values: ArraySource, cu_seqlens: ArraySource, shapes: ArraySource) -> None:
        v = host_array(values, "values")
        c = host_array(cu_seqlens, "cu_seqlens")
        s = host_array(shapes, "shapes")
        if len(v.shape) != 1:
            raise InvalidArgumentError(
                f"values must be one-dimensional, got shape {tuple(v.shape)}"
            )
        check_dtype(v.dtype)
        if c.dtype != np.int32 or len(c.shape) != 1:
            raise InvalidArgumentError(
                f"cu_seqlens must be a 1-D int32 array, got {c.dtype} of shape {tuple(c.shape)}"
            )
        if s.dtype != np.uint64 or len(s.shape) != 2:
            raise InvalidArgumentError(
                f"shapes must be a 2-D uint64 array (n, ndim), "
                f"got {s.dtype} of shape {tuple(s.shape)}"
            )
        if s.shape[1] < 1:
            raise InvalidArgumentError("shapes must have ndim >= 1 columns")
        if s.shape[0] + 1 != c.shape[0]:
            raise InvalidArgumentError(
                f"cu_seqlens holds {c.shape[0]} offsets but shapes describes {s.shape[0]} records; "
                "it needs n + 1"
            )
        for name, a in (("values", v), ("cu_seqlens", c), ("shapes", s)):
            if isinstance(a, np.ndarray) and not a.flags.c_contiguous:
                raise InvalidArgumentError(f"{name} must be C-contiguous")
        _native.check_ragged(v, c, s, v.dtype.itemsize, s.shape[1])
        self.values, self.cu_seqlens, self.shapes = (
            _as_dltensor(v),
            _as_dltensor(c),
            _as_dltensor(s),
        )
        self._from_readonly_mapping = isinstance(v, np.ndarray) and is_readonly_mapping(v)

    @classmethod
    def _trusted(cls, values: DLTensor, cu_seqlens: DLTensor, shapes: DLTensor) -> Self:
        b = object.__new__(cls)
        b.values, b.cu_seqlens, b.shapes = values, cu_seqlens, shapes
        b._from_readonly_mapping = False
        return b

    @classmethod
    def from_records(cls, records: Iterable[npt.NDArray[np.generic]]) -> Self:
        """Packs a finite iterable of NumPy arrays of one dtype and ndim (>= 1)."""
        if isinstance(records, np.ndarray):
            raise TypeError(
                "from_records takes an iterable of record arrays; for one fixed-shape array "
                "use Dense, or iterate it explicitly with list(array)"
            )
        arrays: list[npt.NDArray[np.generic]] = []
        for i, r in enumerate(records):
            if not isinstance(r, np.ndarray):
                raise TypeError(f"record {i} is a {type(r).__name__}, expected a NumPy array")
            arrays.append(r)
        if not arrays:
            raise InvalidArgumentError(
                "from_records needs at least one record to know the dtype and ndim; "
                "build an empty batch with RaggedBatch(values, cu_seqlens, shapes)"
            )
        dt, nd = arrays[0].dtype, arrays[0].ndim
        if nd == 0:
            raise InvalidArgumentError("record 0 is 0-dimensional; Ragged records need ndim >= 1")
        for i, r in enumerate(arrays):
            if r.dtype != dt:
                raise InvalidArgumentError(f"record {i} has dtype {r.dtype}, record 0 has {dt}")
            if r.ndim != nd:
                raise InvalidArgumentError(f"record {i} has ndim {r.ndim}, record 0 has {nd}")
        check_dtype(dt)
        sizes = np.fromiter((r.size for r in arrays), dtype=np.int64, count=len(arrays))
        total = int(sizes.sum())
        if total > MAX_ELEMENTS:
            raise InvalidArgumentError(
                f"{total} elements overflow int32 cu_seqlens; split the records"
            )
        cu = np.zeros(len(arrays) + 1, dtype=np.int32)
        np.cumsum(sizes, out=cu[1:])
        values = np.empty(total, dtype=dt)
        for r, a, b in zip(arrays, cu[:-1], cu[1:], strict=True):
            values[a:b] = r.reshape(-1)
        shapes = np.array([r.shape for r in arrays], dtype=np.uint64).reshape(len(arrays), nd)
        return cls._trusted(_as_dltensor(values), _as_dltensor(cu), _as_dltensor(shapes))

    @classmethod
    def from_arrow(
        cls, array: pa.ListArray[Any] | pa.LargeListArray[Any] | pa.ChunkedArray[Any]
    ) -> Self:
        """Packs a pyarrow ``ListArray`` / ``LargeListArray`` of a primitive type (or
        a ``ChunkedArray`` of one chunk) as one-dimensional records. Values are
        shared with Arrow when its buffers allow; ``LargeListArray`` offsets are
        narrowed to int32 after an overflow check. Nulls are refused."""
        import pyarrow as pa

        if isinstance(array, pa.ChunkedArray):
            if array.num_chunks != 1:
                raise InvalidArgumentError(
                    f"from_arrow takes one chunk, got {array.num_chunks}; "
                    "call combine_chunks() first"
                )
            array = array.chunk(0)
        if not isinstance(array, (pa.ListArray, pa.LargeListArray)):
            raise TypeError(
                "from_arrow takes a pyarrow ListArray or LargeListArray, "
                f"got {type(array).__name__}"
            )
        if array.null_count:
            raise InvalidArgumentError(
                f"the list array holds {array.null_count} nulls; records cannot be null"
            )
        # flatten() respects slicing, unlike .values; pyarrow's stubs leave the type
        # of its elements open.
        flat = cast("pa.Array[Any]", array.flatten())  # pyright: ignore[reportUnknownMemberType]
        if flat.null_count:
            raise InvalidArgumentError(f"the list values hold {flat.null_count} nulls")
        if not pa.types.is_primitive(flat.type) or pa.types.is_boolean(flat.type):
            raise TypeError(f"list values must be a fixed-width numeric type, got {flat.type}")
        values = flat.to_numpy(zero_copy_only=True)
        offsets = array.offsets.to_numpy(zero_copy_only=True)
        lengths = np.diff(offsets).astype(np.uint64)
        rebased = offsets - offsets[0]
        if rebased[-1] > MAX_ELEMENTS:
            raise InvalidArgumentError(
                f"{rebased[-1]} elements overflow int32 cu_seqlens; slice the array"
            )
        cu = rebased if rebased.dtype == np.int32 else rebased.astype(np.int32)
        return cls(values, np.ascontiguousarray(cu), lengths.reshape(-1, 1))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.values.dtype)

    @property
    def ndim(self) -> int:
        """Dimensions of each record."""
        return int(self.shapes.shape[1])

    @property
    def device(self) -> tuple[int, int]:
        return self.values.device

    def __len__(self) -> int:
        return int(self.shapes.shape[0])

    def __dlpack__(self, **kwargs: object) -> NoReturn:
        # A packed batch is three arrays, not one tensor; consumers call this
        # (and __dlpack_device__) to import it, so they report this message.
        raise TypeError(_NOT_ONE_TENSOR)

    def __dlpack_device__(self) -> NoReturn:
        raise TypeError(_NOT_ONE_TENSOR)

    def __array__(self, *args: object, **kwargs: object) -> NoReturn:
        # Without it np.asarray(batch) would silently be a 0-d object array.
        raise TypeError(_NOT_ONE_TENSOR)

    def to_tensors(self) -> list[DLTensor]:
        """Per-record DLTensor views restored to their shapes, sharing this
        batch's memory. Needs memory the host can read (host or managed)."""
        return self.values._split(self.cu_seqlens, self.shapes)

    def __repr__(self) -> str:
        return f"RaggedBatch({len(self)} records, dtype={self.dtype}, ndim={self.ndim})"


class RaggedWriter(StoreWriter):
    """Append-only builder of a Ragged store; returned by ``Ragged.create``."""

    def __init__(
        self,
        native: _native.Writer,
        path: str,
        dtype: np.dtype,
        ndim: int,
        codec: str,
        data_shards: int,
    ) -> None:
        super().__init__(native, path, dtype, codec, data_shards)
        self._ndim = ndim

    @property
    def ndim(self) -> int:
        return self._ndim

    def append(self, batch: RaggedBatch) -> None:
        """Appends every record of a packed RaggedBatch of the schema's dtype and
        ndim. Build one from record arrays with RaggedBatch.from_records."""
        self._check_open()
        if not isinstance(batch, RaggedBatch):
            raise TypeError(
                f"Ragged.append takes a RaggedBatch, got {type(batch).__name__}; "
                "use RaggedBatch.from_records(records) to pack record arrays"
            )
        if batch.dtype != self._dtype:
            raise InvalidArgumentError(f"expected dtype {self._dtype}, got {batch.dtype}")
        if batch.ndim != self._ndim:
            raise InvalidArgumentError(
                f"expected records of ndim {self._ndim}, got ndim {batch.ndim}"
            )
        self._native.append_ragged(
            batch.values,
            batch.cu_seqlens,
            batch.shapes,
            batch._from_readonly_mapping,  # pyright: ignore[reportPrivateUsage]
        )


class Ragged(StoreReader[RaggedBatch]):
    """A Ragged store: variable-shape records of one dtype and ndim >= 1.

    ``rs[i]`` is a one-record RaggedBatch; any collection of positions is one
    RaggedBatch in the requested order."""

    _kind = "ragged"

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dtype: npt.DTypeLike,
        *,
        ndim: int,
        codec: str,
        data_shards: int = _native.DEFAULT_DATA_SHARDS,
        dict_bytes: bytes | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> RaggedWriter:
        """Starts a new Ragged store at `path`, which must not exist. `attrs` is
        stored with it, as for ``Dense.create``."""
        p, dt, files, dct, att = create_args(path, dtype, codec, data_shards, dict_bytes, attrs)
        nd = check_int(ndim, "ndim", 0)
        native = _native.Writer.create_ragged(p, dt.name, nd, codec, files, dct, att)
        return RaggedWriter(native, p, dt, nd, codec, files)

    @property
    def ndim(self) -> int:
        """Dimensions of each record."""
        return self._store().ndim

    def lengths(self, start: int = 0, stop: int | None = None) -> npt.NDArray[np.uint64]:
        """Each record's length along axis 0 (its first dimension), for the records
        in ``start..stop`` (default: every record), as a fresh ``uint64`` array.
        Read from the index, which holds every record's shape: no record is read,
        and a remote store fetches (or finds in memory or its cache) only the
        index blocks of the range."""
        store = self._store()
        begin = check_int(start, "start", 0, self._len)
        end = self._len if stop is None else check_int(stop, "stop", begin, self._len)
        return store.record_lengths(begin, end)

    def _one(self, store: _native.Store, pos: int) -> RaggedBatch:
        return self._many(store, np.array([pos], dtype=np.int64))

    def _many(self, store: _native.Store, pos: Positions) -> RaggedBatch:
        gathered = store.gather_ragged(pos, self._native_allocator())
        return RaggedBatch._trusted(*gathered)  # pyright: ignore[reportPrivateUsage]

    def _finish(
        self, store: _native.Store, pending: _native.PendingGather, tally: _native.Tally | None
    ) -> RaggedBatch:
        gathered = store.finish_ragged(pending, tally)
        return RaggedBatch._trusted(*gathered)  # pyright: ignore[reportPrivateUsage]

    def gather(self, positions: Positions) -> RaggedBatch:
        """Batch read of a contiguous 1-D int64/uint64 position array: the
        loader's hot path."""
        gathered = self._store().gather_ragged(positions, self._native_allocator())
        return RaggedBatch._trusted(*gathered)  # pyright: ignore[reportPrivateUsage]

    def _gather_counted(self, positions: Positions, tally: _native.Tally | None) -> RaggedBatch:
        gathered = self._store().gather_ragged(positions, self._native_allocator(), tally)
        return RaggedBatch._trusted(*gathered)  # pyright: ignore[reportPrivateUsage]
