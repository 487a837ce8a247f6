"""Decoding of encoded files for ``decode=``: images with Pillow, audio with
soundfile, each imported on first use."""

from __future__ import annotations

import importlib
import io
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from ..errors import MissingDependencyError
from ._plan import BadRecord, Plan

if TYPE_CHECKING:
    import numpy.typing as npt


def _pillow() -> object:
    try:
        return importlib.import_module("PIL.Image")
    except ImportError as e:
        raise MissingDependencyError(
            "decode= decodes images with Pillow, which is not installed: "
            "`pip install pillow`, or leave decode= out to store the encoded files",
            name="PIL",
        ) from e


def decode_image(data: bytes, plan: Plan, row: int) -> npt.NDArray[np.generic]:
    """The pixels of one encoded image, as datasets decodes them: EXIF orientation
    applied, converted to the feature's mode when it declares one."""
    image_mod = cast("_PILImage", _pillow())
    ops = cast("_PILOps", importlib.import_module("PIL.ImageOps"))
    try:
        img = image_mod.open(io.BytesIO(data))
        img.load()
    except Exception as e:  # Pillow raises many kinds for a damaged file
        raise BadRecord(f"column {plan.column!r}: row {row} is not a decodable image: {e}") from e
    img = ops.exif_transpose(img)
    if plan.image_mode is not None and img.mode != plan.image_mode:
        img = img.convert(plan.image_mode)
    elif img.mode == "P":
        raise BadRecord(
            f"column {plan.column!r}: row {row} is a palette image, whose pixels are "
            "palette indices; declare the mode to decode to, e.g. "
            f"dataset.cast_column({plan.column!r}, Image(mode='RGB'))"
        )
    return np.asarray(img)


def _soundfile() -> _SoundFile:
    try:
        return cast(_SoundFile, importlib.import_module("soundfile"))
    except (ImportError, OSError) as e:  # OSError: the module found no libsndfile
        raise MissingDependencyError(
            "decode= decodes audio with soundfile, which is not installed: "
            "`pip install soundfile`, or leave decode= out to store the encoded files",
            name="soundfile",
        ) from e


# The sample type each subtype of integer PCM decodes to; every other subtype
# (floats, and lossy codecs that decode to floats) keeps its float width.
_PCM_DTYPES = {"PCM_S8": "int16", "PCM_U8": "int16", "PCM_16": "int16", "PCM_24": "int32",
               "PCM_32": "int32", "DOUBLE": "float64"}  # fmt: skip


def decode_audio(data: bytes, plan: Plan, row: int) -> npt.NDArray[np.generic]:
    """The samples of one encoded audio file as ``(frames, channels)``, in the
    narrowest type that holds them exactly (int16 for 8- and 16-bit PCM, int32
    for 24- and 32-bit, float32 or float64 for float data), at the file's own
    rate, which must be the column's: resampling is the application's choice."""
    sf = _soundfile()
    try:
        info = sf.info(io.BytesIO(data))
        dtype = _PCM_DTYPES.get(info.subtype, "float32")
        samples, rate = sf.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    except Exception as e:  # libsndfile's errors for a damaged or unknown file
        raise BadRecord(f"column {plan.column!r}: row {row} is not decodable audio: {e}") from e
    if plan.sampling_rate is None:
        plan.sampling_rate = int(rate)
    elif rate != plan.sampling_rate:
        raise BadRecord(
            f"column {plan.column!r}: row {row} is sampled at {rate} Hz, the column at "
            f"{plan.sampling_rate} Hz; one store holds one rate: resample with Dataset.map "
            "first, or store the encoded files (leave the column out of decode=)"
        )
    return np.ascontiguousarray(samples)


class _SoundInfo(Protocol):
    @property
    def subtype(self) -> str: ...


class _SoundFile(Protocol):
    def info(self, file: io.BytesIO) -> _SoundInfo: ...
    def read(
        self, file: io.BytesIO, *, dtype: str, always_2d: bool
    ) -> tuple[npt.NDArray[np.generic], int]: ...


class _PILImageObj(Protocol):
    @property
    def mode(self) -> str: ...
    def load(self) -> object: ...
    def convert(self, mode: str) -> _PILImageObj: ...


class _PILImage(Protocol):
    def open(self, fp: io.BytesIO) -> _PILImageObj: ...


class _PILOps(Protocol):
    def exif_transpose(self, image: _PILImageObj) -> _PILImageObj: ...
