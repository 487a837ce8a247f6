"""This process's slice of every global batch: its rank and the process count,
from the arguments or from a JAX or torch.distributed runtime already running."""

from __future__ import annotations

import sys
from typing import Any

from .._schema import check_int
from ..errors import InvalidArgumentError


def _runtime_process() -> tuple[int, int, str] | None:
    """(rank, count, which runtime) from a JAX or torch.distributed runtime that is
    initialised, or None. Looks only at modules already imported: importing a
    framework to learn that it is not in use would cost seconds, and JAX would
    claim devices on import of its backends."""
    # Any: duck-typed access to modules this package does not depend on.
    jax: Any = sys.modules.get("jax")
    if jax is not None:
        initialized: object = getattr(getattr(jax, "distributed", None), "is_initialized", None)
        if callable(initialized) and initialized():
            index: object = jax.process_index()
            count: object = jax.process_count()
            return _runtime_int(index, "jax"), _runtime_int(count, "jax"), "jax"
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None:
        available: object = getattr(dist, "is_available", None)
        initialized = getattr(dist, "is_initialized", None)
        if callable(available) and available() and callable(initialized) and initialized():
            rank: object = dist.get_rank()
            world: object = dist.get_world_size()
            return _runtime_int(rank, "torch"), _runtime_int(world, "torch"), "torch.distributed"
    return None


def _runtime_int(value: object, runtime: str) -> int:
    v = exact_int(value)
    if v is None or v < 0:
        raise RuntimeError(f"{runtime} reported the process rank or count {value!r}")
    return v


def resolve_process(index: object, count: object) -> tuple[int, int, str]:
    """The loader's (process_index, process_count, where they came from)."""
    if index is None and count is None:
        found = _runtime_process()
        if found is None:
            return 0, 1, "default"
        i, n, source = found
    elif index is None or count is None:
        names = ("process_index", "process_count")
        given, missing = names if count is None else names[::-1]
        raise InvalidArgumentError(
            f"{given} is given but {missing} is not; give both, or neither to take them "
            "from an initialised JAX or torch.distributed runtime"
        )
    else:
        i = check_int(index, "process_index", 0)
        n = check_int(count, "process_count", 1)
        source = "arguments"
    if i >= n:
        raise InvalidArgumentError(f"process_index {i} is not below process_count {n} ({source})")
    return i, n, source


def split_description(processes: int, bindings: int) -> str:
    if processes == 1:
        return f"{bindings} bindings"
    return f"{processes} processes x {bindings} bindings = {processes * bindings}"


def exact_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
