"""Host memory: the one check that an array another framework made is on the host,
and the one way such an array becomes memory the package reads in place."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, SupportsInt, TypeAlias, cast

import numpy as np

from . import _native
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    import numpy.typing as npt

    HostArray: TypeAlias = "npt.NDArray[np.generic] | _native.DLTensor"

DL_CPU: int = _native.DL_CPU


class _DLPackDevice(Protocol):
    def __dlpack_device__(self) -> tuple[SupportsInt, int]: ...


def dlpack_device(value: object) -> tuple[int, int] | None:
    """The ``(device type, device id)`` pair `value` reports through
    ``__dlpack_device__``; ``(DL_CPU, 0)`` for a producer without that method,
    which DLPack reads as host memory; None for an object that is no producer."""
    if isinstance(value, _native.DLTensor):
        return value.device
    report = getattr(value, "__dlpack_device__", None)
    if callable(report):
        kind, index = cast(_DLPackDevice, value).__dlpack_device__()
        return int(kind), int(index)
    if hasattr(value, "__dlpack__"):
        return (DL_CPU, 0)
    return None


def on_host(value: object, what: str, hint: str) -> None:
    """Refuses a producer whose memory is not on the host, naming its DLPack
    device and saying what to do (`hint`)."""
    device = dlpack_device(value)
    if device is not None and device[0] != DL_CPU:
        raise InvalidArgumentError(
            f"{what} is in device memory (DLPack device type {device[0]}); {hint}"
        )


def host_array(data: object, what: str) -> HostArray:
    """A NumPy array or loaderx DLTensor for `data`, refusing anything that would
    need coercion or a device transfer."""
    if isinstance(data, np.ndarray):
        return cast("npt.NDArray[np.generic]", data)
    if isinstance(data, _native.DLTensor):
        return data
    if hasattr(data, "__dlpack__"):
        on_host(data, what, "transfer it to the host explicitly")
        # Imported natively rather than with np.from_dlpack, which refuses the
        # bfloat16 and float8 type codes that torch and JAX export.
        try:
            return _native.DLTensor._from_dlpack(data)  # pyright: ignore[reportPrivateUsage]
        except BufferError as e:
            raise InvalidArgumentError(f"{what}: {e}") from None
    raise TypeError(
        f"{what} must be a NumPy array, a CPU DLPack producer or a loaderx DLTensor, "
        f"got {type(data).__name__} (append does not coerce)"
    )


def host_numpy(data: object, what: str) -> npt.NDArray[np.generic]:
    """A NumPy view of a host array, host DLTensor or CPU DLPack producer."""
    arr = host_array(data, what)
    if isinstance(arr, np.ndarray):
        return arr
    on_host(arr, what, "transfer it to the host explicitly")
    return np.asarray(arr)
