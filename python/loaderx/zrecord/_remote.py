"""What a reader of a store URL is opened with: its storage options and cache."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, cast

from .. import _native
from .._schema import check_int, fspath
from ..errors import InvalidArgumentError
from ._options import StorageOptions

__all__ = ["Cache", "StorageOptions"]

_U64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Cache:
    """A local directory that keeps blocks of remote stores' data files (and
    their indexes) so that records read again are not fetched again.

    ``max_bytes`` bounds what the directory holds: past it, the least recently
    used blocks are removed. ``block_bytes`` is the unit fetched and kept.
    Blocks are keyed by the store's header checksum, so a store replaced at the
    same URL never meets the old store's blocks. Any number of processes may
    share one directory. See docs/remote.md."""

    path: str
    max_bytes: int = _native.DEFAULT_CACHE_MAX_BYTES
    block_bytes: int = _native.DEFAULT_CACHE_BLOCK_BYTES

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", os.path.abspath(fspath(self.path)))
        # Both are unsigned 64-bit on the native side, which checks the block size
        # further when the cache is opened.
        check_int(self.max_bytes, "max_bytes", 0, _U64_MAX)
        check_int(self.block_bytes, "block_bytes", 1, _U64_MAX)


OptionValue = str | bool | int | float


class Remote(NamedTuple):
    """What reopens a remote reader: its URL, storage options and cache."""

    url: str
    options: tuple[tuple[str, OptionValue], ...]
    cache: Cache | None

    def open(self) -> _native.Store:
        """The native store, opened anew."""
        options = native_options(self.options)
        c = self.cache
        if c is None:
            return _native.Store.open_url(self.url, options)
        return _native.Store.open_url(self.url, options, c.path, c.max_bytes, c.block_bytes)


def url_text(url: str) -> str:
    """`url`, once checked to be text: a str holding a lone surrogate (how Python
    keeps undecodable bytes) names no object."""
    try:
        url.encode()
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{url!r}: a URL is text, and this one holds a lone surrogate at position {e.start}"
        ) from None
    return url


def native_options(options: tuple[tuple[str, OptionValue], ...]) -> dict[str, OptionValue]:
    # The native side takes the values as given and checks them, naming the key.
    return dict(options)


def option_pairs(options: StorageOptions | None) -> tuple[tuple[str, OptionValue], ...]:
    """The options as (name, value) pairs, as given: the native side checks every
    name and value, naming the key it refuses."""
    if options is None:
        return ()
    if not isinstance(options, Mapping):
        raise TypeError(f"storage_options must be a dict, got {type(options).__name__}")
    return tuple(cast("Mapping[str, OptionValue]", options).items())


def cache_arg(cache: Cache | str | os.PathLike[str] | None) -> Cache | None:
    if cache is None or isinstance(cache, Cache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return Cache(fspath(cache))
    raise TypeError(f"cache must be a Cache or a directory path, got {type(cache).__name__}")
