"""Validation of the arguments that define a store's schema."""

from __future__ import annotations

import json
import math
import numbers
import operator
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np

from . import _native
from .errors import InvalidArgumentError, ZrecordError

if TYPE_CHECKING:
    import numpy.typing as npt

CODECS: tuple[str, ...] = _native.CODECS
DICTIONARY_CODECS: tuple[str, ...] = _native.DICTIONARY_CODECS
MAX_DATA_SHARDS: int = _native.MAX_DATA_SHARDS
MAX_DATA_FILES: int = _native.MAX_DATA_FILES
MAX_ATTRS_BYTES: int = _native.MAX_ATTRS_BYTES

# The element types a store holds, by NumPy name: exactly those DLPack represents
# without loss, as the format defines them. `bfloat16` and the float8 types are
# the optional ml_dtypes package's; `_native.numpy_dtype` imports it only when one
# of them is asked for by a name NumPy does not know yet.
DTYPES: tuple[str, ...] = _native.DTYPES


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a store dtype name. MissingDependencyError (an
    ImportError) when it is an ml_dtypes type and ml_dtypes is not installed."""
    return _native.numpy_dtype(name)


def _is_store_dtype(dt: np.dtype) -> bool:
    # A NumPy dtype of an ml_dtypes type means the package is already imported,
    # so resolving its name costs no import.
    return dt.name in DTYPES and dt == numpy_dtype(dt.name)


def check_dtype(dtype: object) -> np.dtype:
    """The NumPy dtype for `dtype`, or ValueError saying why it cannot be stored
    (MissingDependencyError when it names an ml_dtypes type and ml_dtypes is not
    installed)."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return numpy_dtype(dtype)
    try:
        dt = np.dtype(cast("npt.DTypeLike", dtype))  # anything else is the TypeError below
    except TypeError:
        # A str names what was asked for; any other object is named by its type,
        # not by a repr that may say nothing (or anything).
        what = "a NumPy dtype, a type such as np.float32 or a name such as 'float32'"
        if isinstance(dtype, str):
            raise InvalidArgumentError(
                f"dtype {dtype!r} is not a NumPy dtype: give {what}"
            ) from None
        raise InvalidArgumentError(f"dtype must be {what}, got {type(dtype).__name__}") from None
    if dt.fields is not None:
        raise InvalidArgumentError(
            f"structured dtype {dt} is not supported: store each field as its own stream"
        )
    if dt.subdtype is not None:
        raise InvalidArgumentError(
            f"subarray dtype {dt} is not supported: put the subarray shape in item_shape instead"
        )
    if dt.metadata:
        raise InvalidArgumentError(f"dtype {dt} carries metadata, which a store cannot keep")
    # Before the checks by kind: ml_dtypes types have kind "V", like raw bytes.
    if _is_store_dtype(dt):
        return dt
    if dt.kind == "O":
        raise InvalidArgumentError("object dtype is not supported: records are typed arrays")
    if dt.kind in "SUV":
        raise InvalidArgumentError(
            f"string/bytes dtype {dt} is not supported: store encoded bytes as np.uint8 records"
        )
    if dt.kind in "mM":
        raise InvalidArgumentError(
            f"datetime dtype {dt} is not supported: store its int64 values instead"
        )
    if dt.itemsize == 0:
        raise InvalidArgumentError(f"dtype {dt} has zero itemsize")
    if not dt.isnative:
        native = dt.newbyteorder("=").str
        raise InvalidArgumentError(
            f"dtype {dt.str} is not native-endian: convert with .astype({native!r})"
        )
    raise InvalidArgumentError(f"dtype {dt} cannot be represented losslessly in DLPack")


def check_int(value: object, name: str, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    v = operator.index(value)
    if v < lo or (hi is not None and v > hi):
        bound = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        raise InvalidArgumentError(f"{name} must be {bound}, got {v}")
    return v


def check_item_shape(item_shape: object) -> tuple[int, ...]:
    if isinstance(item_shape, numbers.Integral) and not isinstance(item_shape, bool):
        item_shape = (item_shape,)
    try:
        dims = tuple(cast("Iterable[object]", item_shape))
    except TypeError:
        raise TypeError(
            f"item_shape must be a tuple of ints, got {type(item_shape).__name__}"
        ) from None
    return tuple(check_int(d, "item_shape dimension", 0) for d in dims)


def fspath(path: object, what: str = "path") -> str:
    """`path` (a str or os.PathLike) as a str."""
    try:
        return os.fspath(cast("str | os.PathLike[str]", path))
    except TypeError:
        raise TypeError(f"{what} must be a str or os.PathLike, got {type(path).__name__}") from None


def codec_problem(codec: object) -> str | None:
    """Why `codec` names no codec, or None when it names one."""
    if isinstance(codec, str) and codec in CODECS:
        return None
    return f"codec must be one of {', '.join(map(repr, CODECS))}, got {codec!r}"


def check_codec(codec: object, dict_bytes: object) -> bytes | None:
    """`dict_bytes` as bytes. Whether the codec needs a dictionary is checked by
    the writer, which owns that rule."""
    problem = codec_problem(codec)
    if problem is not None:
        raise InvalidArgumentError(problem)
    if dict_bytes is None:
        return None
    if not isinstance(dict_bytes, (bytes, bytearray, memoryview)):
        raise TypeError(f"dict_bytes must be bytes, got {type(dict_bytes).__name__}")
    return bytes(cast("bytes | bytearray | memoryview[int]", dict_bytes))


#: How deep attrs may nest dicts and lists: far beyond any record of a source,
#: and well within what every JSON reader (Python's included) reads back.
MAX_ATTRS_DEPTH = 100

#: The most decimal digits of an integer in attrs: Python refuses to read a
#: longer one back (``sys.get_int_max_str_digits()``'s default).
MAX_ATTRS_INT_DIGITS = 4300
_TOO_BIG = 10**MAX_ATTRS_INT_DIGITS


def _check_str(value: str, where: str) -> None:
    try:
        value.encode()
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{where} holds a lone surrogate ({value[e.start]!r} at position {e.start}), "
            "which UTF-8 cannot encode"
        ) from None


def _check_json(value: object, where: str, active: list[int]) -> None:
    """Refuses anything in `value` that would not read back from JSON equal to
    itself: a type other than dict, list, str, int, float, bool and None (NumPy
    scalars other than float64, tuples and sets among them), a dict key that is
    not a str, a str that is not Unicode text (a lone surrogate), an integer of
    more than MAX_ATTRS_INT_DIGITS digits, a float that is not finite, a
    container inside itself, and nesting deeper than MAX_ATTRS_DEPTH."""
    kind: type[object] = type(value)
    ident = id(value)
    if isinstance(value, str):
        _check_str(value, where)
        return
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) >= _TOO_BIG:
            raise InvalidArgumentError(
                f"{where} is an integer of more than {MAX_ATTRS_INT_DIGITS:,} digits, which "
                "JSON readers (Python's included) refuse to read back; store it as a string"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(
                f"{where} is {value!r}; JSON has no NaN or infinity, so attrs cannot hold it"
            )
        return
    if not isinstance(value, (dict, list)):
        hint = " (use a list)" if isinstance(value, (tuple, set, frozenset)) else ""
        raise TypeError(
            f"{where} is a {kind.__module__}.{kind.__qualname__}; attrs hold "
            f"only dict (str keys), list, str, int, float, bool and None{hint}"
        )
    if ident in active:
        raise InvalidArgumentError(f"{where} contains itself; attrs must be a tree")
    if len(active) >= MAX_ATTRS_DEPTH:
        raise InvalidArgumentError(
            f"{where} nests dicts and lists more than {MAX_ATTRS_DEPTH} deep; attrs nest "
            f"at most {MAX_ATTRS_DEPTH} levels"
        )
    active.append(ident)
    if isinstance(value, dict):
        for k, v in cast("dict[object, object]", value).items():
            if not isinstance(k, str):
                raise TypeError(
                    f"{where} has the key {k!r} of type {type(k).__name__}; "
                    "attrs keys must be str (JSON would turn it into a string)"
                )
            _check_str(k, f"{where} key {k!r}")
            _check_json(v, f"{where}[{k!r}]", active)
    else:
        for i, v in enumerate(cast("list[object]", value)):
            _check_json(v, f"{where}[{i}]", active)
    active.pop()


def encode_attrs(attrs: object) -> bytes | None:
    """`attrs` (a dict of str keys and JSON values) as the bytes a store keeps;
    None for None or an empty dict, which a store keeps as no attributes. Keys are
    sorted. Refuses,
    naming the place, anything that would not read back equal, and more than
    ``MAX_ATTRS_BYTES`` of JSON."""
    if attrs is None:
        return None
    if not isinstance(attrs, dict):
        raise TypeError(f"attrs must be a dict with str keys, got {type(attrs).__name__}")
    attrs = cast("dict[object, object]", attrs)
    _check_json(attrs, "attrs", [])
    if not attrs:
        return None
    # Keys sorted, so that equal attributes are equal bytes (and so equal header
    # checksums; concat compares sources' attributes by their bytes).
    raw = json.dumps(
        attrs, ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
    ).encode()
    if len(raw) > MAX_ATTRS_BYTES:
        raise InvalidArgumentError(
            f"attrs take {len(raw):,} bytes of JSON; a store keeps at most {MAX_ATTRS_BYTES:,}"
        )
    return raw


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def decode_attrs(raw: bytes | None, path: str) -> dict[str, Any]:
    """A fresh dict of the attributes a store keeps (`raw`, None for none).
    ZrecordError when they are not a JSON object (the store was not written by
    loaderx: the header's checksum already guarantees the bytes are the ones
    written)."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw.decode(), parse_constant=_no_constant)
    except RecursionError:
        # Another writer's attributes, nested deeper than Python's stack allows.
        err = ZrecordError(f"{path}: the attributes nest too deep to be read")
        err.path = path
        raise err from None
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError included
        err = ZrecordError(f"{path}: the attributes are not JSON: {e}")
        err.path = path
        raise err from None
    if not isinstance(value, dict):
        err = ZrecordError(
            f"{path}: the attributes are a JSON {type(value).__name__}, not an object"
        )
        err.path = path
        raise err
    return cast("dict[str, Any]", value)
