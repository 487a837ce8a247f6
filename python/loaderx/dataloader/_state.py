"""The resume state's JSON data: what names a sampler's sequence and a
reader's store."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import TypeAlias, cast

from ..errors import InvalidArgumentError
from ..protocols import ConfiguredSampler, IndexSampler

STATE_VERSION = 3

#: How deep a resume state may nest dicts and lists; state_dict() makes a few
#: levels, and a deeper state (or one inside itself) is refused before anything
#: compares or prints it.
MAX_STATE_DEPTH = 32

JSON: TypeAlias = "None | bool | int | str | list[JSON] | dict[str, JSON]"
State: TypeAlias = "dict[str, JSON]"


def plain(value: object, what: str) -> JSON:
    """`value` as JSON data (tuples become lists), or a TypeError naming `what`."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [plain(v, what) for v in cast("Sequence[object]", value)]
    if isinstance(value, Mapping):
        out: dict[str, JSON] = {}
        for k, v in cast("Mapping[object, object]", value).items():
            if not isinstance(k, str):
                raise TypeError(f"{what} has the key {k!r}; resume states use str keys only")
            out[k] = plain(v, what)
        return out
    kind = type(value).__name__
    # A number's value helps; any other object's repr is an address or anything.
    shown = f" ({value!r})" if isinstance(value, numbers.Number) else ""
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    raise TypeError(
        f"{what} holds {article} {kind}{shown}; resume states hold only "
        "dict, list, str, int, bool and None, so that they survive JSON"
    )


def check_depth(value: object, what: str, why: str = "it was not made by state_dict()") -> None:
    """Refuses `value` if it nests dicts, lists or tuples more than
    MAX_STATE_DEPTH deep (a container inside itself does), without recursing."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            children = list(cast("Mapping[object, object]", v).values())
        elif isinstance(v, (list, tuple)):
            children = list(cast("Sequence[object]", v))
        else:
            continue
        if depth >= MAX_STATE_DEPTH:
            raise InvalidArgumentError(
                f"{what} nests dicts and lists more than {MAX_STATE_DEPTH} deep; {why}"
            )
        stack.extend((c, depth + 1) for c in children)


def sampler_key(sampler: IndexSampler) -> JSON:
    """What identifies the sampler's sequence of batches, for refusing a resume
    state taken with another configuration."""
    if isinstance(sampler, ConfiguredSampler):
        config = sampler.config()
        check_depth(config, "the sampler's config()", "a resume state holds it")
        return plain(config, "the sampler's config()")
    return None


def store_identity(reader: object, where: str) -> int | str | None:
    """The identity of the store `reader` reads: its ``identity``, else its
    ``header_checksum``, else None."""
    value: object = getattr(reader, "identity", None)
    if value is None:
        value = getattr(reader, "header_checksum", None)
    if callable(value):
        value = value()
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if not isinstance(value, bool) and isinstance(value, numbers.Integral):
        return int(value)
    raise TypeError(
        f"{where}: the reader's store identity is a {type(value).__name__}; "
        "expected an int, a str or bytes"
    )


def as_mapping(value: object, message: str) -> Mapping[object, object]:
    # The public signatures are typed, but callers need not be: check at run time.
    if not isinstance(value, Mapping):
        raise TypeError(f"{message}, got {type(value).__name__}")
    return cast("Mapping[object, object]", value)
