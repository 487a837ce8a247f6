"""Dense stores: one fixed-shape array per record."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex, cast

import numpy as np

from .. import _native
from .._host import host_array
from .._schema import check_item_shape
from ..errors import InvalidArgumentError
from ._reader import StoreReader
from ._writer import StoreWriter, create_args, is_readonly_mapping

if TYPE_CHECKING:
    import numpy.typing as npt

    from .._host import HostArray
    from ..protocols import Positions
    from ._keys import SupportsDLPack

    ArraySource = npt.NDArray[np.generic] | _native.DLTensor | SupportsDLPack

DLTensor = _native.DLTensor


class DenseWriter(StoreWriter):
    """Append-only builder of a Dense store; returned by ``Dense.create``."""

    def __init__(
        self,
        native: _native.Writer,
        path: str,
        dtype: np.dtype,
        item_shape: tuple[int, ...],
        codec: str,
        data_shards: int,
    ) -> None:
        super().__init__(native, path, dtype, codec, data_shards)
        self._item_shape = item_shape

    @property
    def item_shape(self) -> tuple[int, ...]:
        return self._item_shape

    def append(self, data: ArraySource) -> None:
        """Appends ``n`` records from an array of exactly the schema's dtype and
        shape ``(n, *item_shape)``: a C-contiguous NumPy array, a CPU DLPack
        producer (torch, JAX, CuPy on the host...), a ``jax.Array`` sharded over
        several host devices by rows, or a loaderx DLTensor. Nothing is
        converted or copied on the way. Pass the whole source in one call;
        memory stays bounded internally."""
        self._check_open()
        blocks = [host_array(b, "data") for b in _row_blocks(data)]
        for arr in blocks:
            self._check_block(arr)
        for arr in blocks:
            release = isinstance(arr, np.ndarray) and is_readonly_mapping(arr)
            self._native.append_dense(arr, arr.shape[0], release)

    def _check_block(self, arr: HostArray) -> None:
        expected = (None, *self._item_shape)
        shape = tuple(arr.shape)
        if arr.dtype != self._dtype:
            raise InvalidArgumentError(f"expected dtype {self._dtype}, got {arr.dtype}")
        if len(shape) != len(expected) or shape[1:] != self._item_shape:
            want = "(n, " + ", ".join(map(str, self._item_shape)) + ")"
            raise InvalidArgumentError(f"expected shape {want.replace(', )', ')')}, got {shape}")
        if isinstance(arr, np.ndarray) and not arr.flags.c_contiguous:
            raise InvalidArgumentError(
                "expected a C-contiguous array, got a strided view; "
                "pass np.ascontiguousarray(data) if a copy is intended"
            )


def _row_blocks(data: object) -> list[object]:
    """`data`, or for an array sharded over several devices (a ``jax.Array``,
    found by its attributes), its device shards' arrays in row order, one per row
    range. Such an array has no single buffer to export; its device shards each
    have one."""
    device_shards = getattr(data, "addressable_shards", None)
    sharding = getattr(data, "sharding", None)
    if device_shards is None or sharding is None or len(getattr(sharding, "device_set", ())) <= 1:
        return [data]
    shape = tuple(int(d) for d in cast("Sequence[SupportsIndex]", cast(Any, data).shape))
    if not getattr(data, "is_fully_addressable", True):
        raise InvalidArgumentError(
            "data is a sharded array with device shards on other processes; each process can "
            "append only what it holds: write one part store per process and publish "
            "them as one with loaderx.zrecord.concat"
        )
    if not shape:
        return [data]
    rows: dict[tuple[int, int], object] = {}
    for device_shard in cast("Iterable[Any]", device_shards):
        index = tuple(cast("tuple[slice, ...]", device_shard.index))
        spans = [s.indices(n)[:2] for s, n in zip(index, shape, strict=True)]
        for axis, (start, stop) in enumerate(spans[1:], 1):
            if (start, stop) != (0, shape[axis]):
                raise InvalidArgumentError(
                    f"data is sharded along axis {axis}; append takes arrays sharded by "
                    f"rows (axis 0) only, without copying: pass np.asarray(data) if one host "
                    f"copy is intended"
                )
        rows.setdefault(spans[0] if spans else (0, shape[0]), device_shard.data)  # replicas once
    at = 0
    blocks: list[object] = []
    for (start, stop), block in sorted(rows.items()):
        if start != at:
            break
        blocks.append(block)
        at = stop
    if at != shape[0]:
        raise InvalidArgumentError(
            f"the device shards of data do not cover its {shape[0]} rows exactly once"
        )
    return blocks


class Dense(StoreReader[DLTensor]):
    """A Dense store: one fixed-shape array per record.

    ``ds[i]`` is one record as a DLTensor of ``item_shape``; ``ds[i, j, k]``, a
    list, an integer array or a slice is one stacked DLTensor of
    ``(n, *item_shape)`` in the requested order."""

    _kind = "dense"

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dtype: npt.DTypeLike,
        item_shape: Iterable[int] | int,
        *,
        codec: str,
        data_shards: int = _native.DEFAULT_DATA_SHARDS,
        dict_bytes: bytes | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> DenseWriter:
        """Starts a new Dense store at `path`, which must not exist. `attrs`, a
        dict of str keys and JSON values (class names, a tokenizer, the source),
        is stored with it and read back as ``reader.attrs``."""
        p, dt, files, dct, att = create_args(path, dtype, codec, data_shards, dict_bytes, attrs)
        shape = check_item_shape(item_shape)
        native = _native.Writer.create_dense(p, dt.name, list(shape), codec, files, dct, att)
        return DenseWriter(native, p, dt, shape, codec, files)

    @property
    def item_shape(self) -> tuple[int, ...]:
        return tuple(self._store().item_shape)

    @property
    def ndim(self) -> int:
        """Dimensions of one record."""
        return len(self.item_shape)

    @property
    def shape(self) -> tuple[int, ...]:
        """``(len, *item_shape)``: the shape of ``self[:]``."""
        return (len(self), *self.item_shape)

    def _one(self, store: _native.Store, pos: int) -> DLTensor:
        return store.get_dense(pos, self._native_allocator())

    def _many(self, store: _native.Store, pos: Positions) -> DLTensor:
        return store.gather_dense(pos, self._native_allocator())

    def _finish(
        self, store: _native.Store, pending: _native.PendingGather, tally: _native.Tally | None
    ) -> DLTensor:
        return store.finish_dense(pending, tally)

    def gather(self, positions: Positions) -> DLTensor:
        """Batch read of a contiguous 1-D int64/uint64 position array, without
        the dispatch of ``__getitem__``: the loader's hot path."""
        return self._store().gather_dense(positions, self._native_allocator())

    def _gather_counted(self, positions: Positions, tally: _native.Tally | None) -> DLTensor:
        return self._store().gather_dense(positions, self._native_allocator(), tally)
