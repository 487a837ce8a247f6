"""JAX global arrays from one step of a data-parallel Loader.

``global_arrays(shards, sharding, step)`` turns the shards one process gathered
(its slice of the global batch, split across its bindings) into one ``jax.Array``
per stream whose global shape is the whole global batch, sharded by `sharding`.
Every addressable device receives only its own rows, cut from the bindings' host
memory; no process builds the global batch, and no rows move between processes.

This module imports JAX, so it is imported only by programs that use it:
``import loaderx`` and the Loader never import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
import numpy.typing as npt
from jax.sharding import Sharding

from ._host import dlpack_device, on_host
from .dataloader import StepInfo
from .errors import InvalidArgumentError
from .zrecord import RaggedBatch

__all__ = ["global_arrays"]

# JAX's annotations leave some parameters unknown to a strict checker; its
# functions are called through this name, which checks nothing.
_jax: Any = jax


def global_arrays(
    shards: Sequence[Mapping[str, object]],
    sharding: Sharding | Mapping[str, Sharding],
    step: StepInfo | None = None,
) -> dict[str, jax.Array]:
    """One ``jax.Array`` per stream of `shards`, laid out by `sharding`.

    `shards` is what one step of a Loader delivers in this process (a list of
    ``{stream: value}`` dicts, one per binding), or a transform's list of the same
    form. Each value is a host DLPack array (a ``DLTensor``, a NumPy array) whose
    first dimension counts records. `sharding` is one ``jax.sharding.Sharding``
    for every stream, or a dict of them by stream name.

    `step` (the ``StepInfo`` of a two-argument transform) says where this
    process's rows lie in the global batch: rows ``step.offset`` to
    ``step.offset + len(step.positions)`` of ``step.batch_size``. Without it, the
    process holds slice ``jax.process_index()`` of ``jax.process_count()`` equal
    slices, which is what a Loader that took its ranks from JAX gathers.

    Every addressable device of `sharding` must need rows that this process
    holds: with a batch axis sharded over all devices, order the mesh's devices
    so that process ``i``'s devices come ``i``-th (``jax.devices()`` order does).
    Ragged values have no global shape and are refused (``TypeError``): densify
    them in the transform first. Values in device memory are refused too
    (``InvalidArgumentError``): this helper places host rows on the devices.
    """
    if not shards:
        raise InvalidArgumentError("shards is empty; pass one step's list of shard dicts")
    names = list(shards[0])
    for i, shard in enumerate(shards):
        if list(shard) != names:
            raise InvalidArgumentError(
                f"binding {i} holds the streams {list(shard)}, binding 0 holds {names}"
            )
    out: dict[str, jax.Array] = {}
    for name in names:
        pieces = [_host(shard[name], name, i) for i, shard in enumerate(shards)]
        out[name] = _global(name, pieces, _sharding_of(sharding, name), step)
    return out


def _sharding_of(sharding: Sharding | Mapping[str, Sharding], name: str) -> Sharding:
    if isinstance(sharding, Sharding):
        return sharding
    if not isinstance(sharding, Mapping):
        raise TypeError(
            "sharding must be a jax.sharding.Sharding or a dict of them by stream name, "
            f"got {type(sharding).__name__}"
        )
    found = sharding.get(name)
    if found is None:
        raise InvalidArgumentError(f"sharding has no entry for stream {name!r}")
    return found


def _host(value: object, name: str, binding: int) -> npt.NDArray[np.generic]:
    where = f"stream {name!r} binding {binding}"
    if isinstance(value, RaggedBatch):
        raise TypeError(
            f"{where} is a RaggedBatch: ragged records have no common shape, so they "
            "make no global array; pad or pack them into a dense array in the "
            "transform, then pass that"
        )
    if dlpack_device(value) is None:
        raise TypeError(f"{where} is a {type(value).__name__}, not a DLPack array")
    on_host(
        value,
        where,
        "global_arrays places host rows on the devices, so bind these readers to host allocators",
    )
    array: npt.NDArray[np.generic] = np.from_dlpack(value)  # pyright: ignore[reportArgumentType]
    if array.ndim == 0:
        raise InvalidArgumentError(f"{where} is a scalar; expected a first dimension of records")
    return array


def _global(
    name: str,
    pieces: list[npt.NDArray[np.generic]],
    sharding: Sharding,
    step: StepInfo | None,
) -> jax.Array:
    first = pieces[0]
    for i, piece in enumerate(pieces):
        if piece.dtype != first.dtype or piece.shape[1:] != first.shape[1:]:
            raise InvalidArgumentError(
                f"stream {name!r} binding {i} holds {piece.dtype} records of shape "
                f"{piece.shape[1:]}, binding 0 holds {first.dtype} of shape {first.shape[1:]}"
            )
    rows = sum(len(p) for p in pieces)
    if step is None:
        offset, total = _jax.process_index() * rows, _jax.process_count() * rows
    else:
        if rows != len(step.positions):
            raise InvalidArgumentError(
                f"stream {name!r} holds {rows} records in this process, but the step "
                f"gathered {len(step.positions)}"
            )
        offset, total = step.offset, step.batch_size
    shape = (total, *first.shape[1:])
    starts = np.cumsum([0] + [len(p) for p in pieces]) + offset
    arrays: list[jax.Array] = []
    # Each device shard's index into the global array, by device.
    device_shards: Mapping[Any, tuple[slice, ...] | None]
    device_shards = _jax_sharding(sharding).addressable_devices_indices_map(shape)
    for device, index in device_shards.items():
        full = (slice(None),) * len(shape)
        where = full if index is None else tuple(index)
        lo, hi, stride = where[0].indices(total)
        if stride != 1 or lo < offset or hi > offset + rows:
            raise InvalidArgumentError(
                f"stream {name!r}: device {device} needs rows {lo}..{hi} of the global "
                f"batch of {total}, but this process holds rows {offset}..{offset + rows}; "
                "order the mesh so that each process's devices cover its own slice"
            )
        parts = [
            p[max(lo, s) - s : min(hi, s + len(p)) - s]
            for p, s in zip(pieces, starts[:-1].tolist(), strict=True)
            if s < hi and s + len(p) > lo
        ]
        # One binding per device (the usual layout) is a view of that binding;
        # a device spanning bindings gets a copy of its own rows only.
        rows_here = parts[0] if len(parts) == 1 else np.concatenate(parts)
        arrays.append(_jax.device_put(rows_here[(slice(None), *where[1:])], device))
    return _jax.make_array_from_single_device_arrays(shape, sharding, arrays)


def _jax_sharding(sharding: Sharding) -> Any:
    return sharding
