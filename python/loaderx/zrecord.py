"""Zrecord: immutable, typed, ordered record containers.

A creator (``Dense.create`` / ``Ragged.create``) consumes records in append order
and ``close()`` publishes one immutable directory. Readers (``Dense.open`` /
``Ragged.open``) gather any positions into one fresh output returned through
DLPack: ``DLTensor`` for Dense, ``RaggedBatch`` for Ragged.

Positions are sequence positions ``0..len-1``. Negative integers are refused with
``IndexError`` rather than counted from the end: a position is a record's identity,
and a wrapped ``-1`` would silently name a different record. Slices follow Python's
slice rules (``ds[-3:]`` is the last three records) because a slice names a range,
not an identity.
"""

from __future__ import annotations

import io
import mmap
import numbers
import operator
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    NamedTuple,
    NoReturn,
    Protocol,
    SupportsIndex,
    SupportsInt,
    TypeAlias,
    TypeVar,
    cast,
)

import numpy as np

from . import _native, errors
from . import progress as _progress
from ._schema import (
    MAX_SHARDS,
    check_codec,
    check_dtype,
    check_int,
    check_item_shape,
    decode_attrs,
    encode_attrs,
    numpy_dtype,
)
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa
    from typing_extensions import CapsuleType, Self

    from .allocator import Allocator
    from .progress import ProgressArg

__all__ = [
    "ConcatResult",
    "Cache",
    "DLTensor",
    "Dense",
    "Ragged",
    "RaggedBatch",
    "ZrecordError",
    "clean",
    "concat",
    "upload",
]

DLTensor = _native.DLTensor
ZrecordError = errors.ZrecordError
DLTensor.__doc__ = """A DLPack-only view of a gathered batch or record.

Consume it with ``np.from_dlpack(t)`` (shares memory), ``torch.from_dlpack(t)`` or
``jax.dlpack.from_dlpack(t)``. It has ``shape``, ``dtype``, ``ndim``, ``nbytes`` and
``device`` (the ``__dlpack_device__()`` pair), and deliberately no ``__array__``.

A tensor in host memory also has NumPy's ``__array_interface__``, so
``np.asarray(t)``, ``jnp.asarray(t)`` and ``torch.as_tensor(t)`` take it too
(NumPy shares its memory). NumPy's DLPack import knows neither ``bfloat16`` nor
the float8 types; ``np.asarray(t)`` gives them as ml_dtypes arrays. A tensor in
device memory has no interface: reading ``__array_interface__`` is a TypeError
saying to use the framework's ``from_dlpack``.
"""

_DL_CPU: int = _native.DL_CPU
# Records whose sizes one call reads from the index (16 bytes each), and the
# stored bytes one step of a verify with progress checks.
_INDEX_STEP = 1 << 20
_VERIFY_STEP_BYTES = 64 << 20


class SupportsDLPack(Protocol):
    """An array a consumer imports with ``__dlpack__`` (NumPy, torch, JAX...)."""

    def __dlpack__(self, *, stream: None = None) -> CapsuleType: ...


class _DLPackDevice(Protocol):
    def __dlpack_device__(self) -> tuple[SupportsInt, int]: ...


if TYPE_CHECKING:
    HostArray: TypeAlias = "npt.NDArray[np.generic] | DLTensor"
    ArraySource: TypeAlias = "npt.NDArray[np.generic] | DLTensor | SupportsDLPack"
    Positions: TypeAlias = "npt.NDArray[np.int64] | npt.NDArray[np.uint64]"
    # SupportsDLPack and SupportsIndex: other frameworks' integer arrays and scalars.
    Key: TypeAlias = (
        int
        | np.integer
        | slice
        | range
        | Sequence[int | np.integer]
        | npt.NDArray[np.integer]
        | SupportsDLPack
        | SupportsIndex
    )

_BatchT = TypeVar("_BatchT")  # what a reader's gather returns


class ModeError(io.UnsupportedOperation, TypeError):
    """Reading a writer or writing a reader."""


def _fspath(path: str | os.PathLike[str]) -> str:
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}") from None


def _is_readonly_mapping(a: npt.NDArray[np.generic]) -> bool:
    """True when `a`'s memory is a read-only shared file mapping (np.load with
    mmap_mode='r'), whose consumed pages the writer may drop from memory."""
    base: object = a
    while base is not None:
        if isinstance(base, np.memmap):
            return base.mode == "r"
        if isinstance(base, mmap.mmap):
            return False
        base = getattr(base, "base", None)
    return False


def _host_array(data: object, what: str) -> HostArray:
    """A NumPy array or loaderx DLTensor for `data`, refusing anything that would
    need coercion or a device transfer."""
    if isinstance(data, (np.ndarray, DLTensor)):
        return cast("HostArray", data)
    if hasattr(data, "__dlpack__"):
        dev = (
            cast(_DLPackDevice, data).__dlpack_device__()
            if hasattr(data, "__dlpack_device__")
            else (_DL_CPU, 0)
        )
        if int(dev[0]) != _DL_CPU:
            raise InvalidArgumentError(
                f"{what} lives on DLPack device {tuple(dev)}; transfer it to the host explicitly"
            )
        # Imported natively rather than with np.from_dlpack, which refuses the
        # bfloat16 and float8 type codes that torch and JAX export.
        try:
            return DLTensor._from_dlpack(data)
        except BufferError as e:
            raise InvalidArgumentError(f"{what}: {e}") from None
    raise TypeError(
        f"{what} must be a NumPy array, a CPU DLPack producer or a loaderx DLTensor, "
        f"got {type(data).__name__} (append does not coerce)"
    )


_ROOT_ALLOCATOR_LOCK = threading.Lock()


def _out_of_range(i: int, n: int) -> IndexError:
    return _native.out_of_range(i, n)


def _position(i: int, n: int) -> int:
    if i < 0 or i >= n:
        raise _out_of_range(i, n)
    return i


def _bad_key(key: object) -> TypeError:
    return TypeError(
        f"a store is indexed by an int, a slice or a collection of ints, not {type(key).__name__}"
    )


def _foreign_array(key: object) -> npt.NDArray[np.generic] | None:
    """A NumPy view of another framework's array (torch, JAX, CuPy...), found by
    protocol so that no framework is imported; None when `key` is none."""
    if hasattr(key, "__dlpack__"):
        return np.asarray(_host_array(key, "positions"))
    if hasattr(key, "__array__"):
        return np.asarray(key)
    return None


def _positions(key: object, n: int) -> int | Positions:
    """An int for a single position, or a 1-D int64/uint64 array for a batch."""
    if isinstance(key, numbers.Integral) and not isinstance(key, (bool, np.bool_)):
        return _position(int(key), n)
    if isinstance(key, slice):
        return np.arange(*key.indices(n), dtype=np.int64)
    if isinstance(key, range):
        return np.arange(key.start, key.stop, key.step, dtype=np.int64)
    foreign = None if isinstance(key, (np.ndarray, tuple, list)) else _foreign_array(key)
    if isinstance(key, np.ndarray) or foreign is not None:
        arr = cast("npt.NDArray[np.generic]", key if foreign is None else foreign)
        if arr.ndim == 0 and arr.dtype.kind in "iu":
            # A 0-d integer array is one position, as a NumPy integer is.
            return _position(int(arr), n)
    elif isinstance(key, (tuple, list)):
        seq = cast("Sequence[object]", key)
        if len(seq) == 0:
            return np.empty(0, dtype=np.int64)
        if not all(
            isinstance(k, numbers.Integral) and not isinstance(k, (bool, np.bool_)) for k in seq
        ):
            raise TypeError("positions must be integers")
        ints = cast("Sequence[int]", seq)  # Integral, by the check above
        try:
            arr = np.asarray(ints, dtype=np.int64)
        except OverflowError:
            big = next(int(k) for k in ints if not -(2**63) <= int(k) < 2**63)
            raise _out_of_range(big, n) from None
    elif hasattr(key, "__index__") and type(key) not in (bool, np.bool_):
        return _position(operator.index(cast(SupportsIndex, key)), n)
    else:
        raise _bad_key(key)
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return np.empty(0, dtype=np.int64)
        raise TypeError(f"positions must be integers, got an array of {arr.dtype}")
    if arr.ndim != 1:
        raise InvalidArgumentError(f"positions must be one-dimensional, got shape {arr.shape}")
    if arr.dtype != np.int64 and arr.dtype != np.uint64:
        arr = arr.astype(np.int64)
    return cast("Positions", np.ascontiguousarray(arr))  # int64 or uint64 by now


class _Fetching(Generic[_BatchT]):
    """A gather a remote store began: calling it waits for the records and
    returns the batch (once); ``cancel()`` stops its requests, even while
    another thread waits in the call."""

    __slots__ = ("_pending", "_reader", "_store")

    def __init__(
        self, reader: _Reader[_BatchT], store: _native.Store, pending: _native.PendingGather
    ) -> None:
        self._reader, self._store, self._pending = reader, store, pending

    def __call__(self) -> _BatchT:
        return self._reader._finish(self._store, self._pending)  # pyright: ignore[reportPrivateUsage]

    def cancel(self) -> None:
        self._pending.cancel()


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
        object.__setattr__(self, "path", os.path.abspath(_fspath(self.path)))
        check_int(self.max_bytes, "max_bytes", 0)
        check_int(self.block_bytes, "block_bytes", 1)


class _Remote(NamedTuple):
    """What reopens a remote reader: its URL, storage options and cache."""

    url: str
    options: tuple[tuple[str, str], ...]
    cache: Cache | None


StorageOptions: TypeAlias = "Mapping[str, str | bool | int | float]"


def _storage_options(options: StorageOptions | None) -> tuple[tuple[str, str], ...]:
    """The options as (name, string) pairs; the native side checks the names."""
    if options is None:
        return ()
    if not isinstance(options, Mapping):
        raise TypeError(f"storage_options must be a dict, got {type(options).__name__}")
    pairs: list[tuple[str, str]] = []
    for k, v in cast("Mapping[object, object]", options).items():
        if not isinstance(k, str):
            raise TypeError(f"storage option names are str, got {type(k).__name__}")
        if isinstance(v, bool):
            pairs.append((k, "true" if v else "false"))
        elif isinstance(v, (str, int, float)):
            pairs.append((k, str(v)))
        else:
            raise TypeError(
                f"storage option {k!r} must be a str, bool, int or float, got {type(v).__name__}"
            )
    return tuple(pairs)


def _cache_arg(cache: Cache | str | os.PathLike[str] | None) -> Cache | None:
    if cache is None or isinstance(cache, Cache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return Cache(_fspath(cache))
    raise TypeError(f"cache must be a Cache or a directory path, got {type(cache).__name__}")


class _Reader(ABC, Generic[_BatchT]):
    """What Dense and Ragged readers share: lifetime, metadata and index dispatch."""

    _kind = ""

    def __init__(
        self,
        native: _native.Store,
        path: str,
        allocator: Allocator | None = None,
        *,
        where: str | None = None,
        remote: _Remote | None = None,
    ) -> None:
        self._native: _native.Store | None = native
        self._path = path
        self._remote = remote
        # The absolute path as of opening, which a pickle reopens: a relative path
        # would name another store once the working directory changes.
        if where is None:
            where = remote.url if remote is not None else os.path.abspath(path)
        self._where = where
        self._allocator = allocator
        self._owns_allocator = False
        self._len = len(native)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        checked: bool = False,
        storage_options: StorageOptions | None = None,
        cache: Cache | str | os.PathLike[str] | None = None,
    ) -> Self:
        """Opens a published store for reading. Raises FileNotFoundError when the
        path does not exist and ZrecordError when it is not an intact store of
        this kind.

        ``checked=True`` verifies every gathered record's stored bytes against the
        checksum in its index entry, so that a damaged record is a ZrecordError
        instead of data; without it only ``verify()`` reads the checksums.

        `path` may be a URL: ``s3://``, ``gs://``, ``az://``, ``http(s)://`` or
        ``file://``. ``storage_options`` configure the object store (object_store's
        key names, such as ``endpoint``, ``region``, ``aws_access_key_id``,
        ``allow_http``) and how records are fetched; ``cache`` is a ``Cache`` or a
        directory path keeping fetched blocks. A remote store always checks every
        record's checksum. See docs/remote.md."""
        p = _fspath(path)
        if not isinstance(checked, bool):
            raise TypeError(f"checked must be a bool, got {type(checked).__name__}")
        if _native.is_url(p):
            remote = _Remote(p, _storage_options(storage_options), _cache_arg(cache))
            return cls(cls._open_remote(remote), p, remote=remote)
        if storage_options is not None or cache is not None:
            raise InvalidArgumentError(
                f"{p}: storage_options and cache apply to store URLs (s3://, gs://, az://, "
                "http(s)://, file://), not to local paths"
            )
        return cls(cls._open_native(p, checked), p)

    @classmethod
    def _open_remote(cls, remote: _Remote) -> _native.Store:
        c = remote.cache
        if c is None:
            native = _native.Store.open_url(remote.url, list(remote.options))
        else:
            native = _native.Store.open_url(
                remote.url, list(remote.options), c.path, c.max_bytes, c.block_bytes
            )
        return cls._check_kind(native, remote.url)

    @classmethod
    def _open_native(cls, path: str, checked: bool) -> _native.Store:
        return cls._check_kind(_native.Store.open(path, checked), path)

    @classmethod
    def _check_kind(cls, native: _native.Store, path: str) -> _native.Store:
        if native.kind != cls._kind:
            raise ZrecordError(
                f"{path}: is a {native.kind.capitalize()} store; open it with "
                f"{native.kind.capitalize()}.open"
            )
        return native

    def _store(self) -> _native.Store:
        if self._native is None:
            raise InvalidArgumentError(f"{self._path}: the store is closed")
        return self._native

    def _native_allocator(self) -> _native.Placement:
        # Readers are the one user of an allocator's native pool.
        return (self._allocator or self.allocator)._native  # pyright: ignore[reportPrivateUsage]

    def bind(self, allocator: Allocator) -> Self:
        """A view of the same store whose outputs land in `allocator`'s memory."""
        from .allocator import Allocator

        if not isinstance(allocator, Allocator):
            raise TypeError(
                f"bind needs a loaderx.allocator.Allocator, got {type(allocator).__name__}"
            )
        return type(self)(
            self._store(), self._path, allocator, where=self._where, remote=self._remote
        )

    @property
    def path(self) -> str:
        return self._path

    @property
    def dtype(self) -> np.dtype:
        """The element type; an ml_dtypes type for ``bfloat16`` and the float8
        types, which needs that package (MissingDependencyError without it)."""
        return numpy_dtype(self._store().dtype)

    @property
    def codec(self) -> str:
        return self._store().codec

    @property
    def checked(self) -> bool:
        """Whether gathers verify each record's checksum (``open(checked=True)``)."""
        return bool(self._store().checked)

    @property
    def header_checksum(self) -> int:
        """The checksum of the store's header. The header holds the checksums of
        every other file, so this number identifies the store's exact contents."""
        return int(self._store().header_checksum)

    @property
    def format_version(self) -> int:
        """The on-disk format version the store was written with."""
        return int(self._store().format_version)

    @property
    def data_shards(self) -> int:
        return self._store().data_shards

    @property
    def attrs(self) -> dict[str, Any]:
        """The attributes given at creation (``{}`` for none), as a fresh dict on
        every access: changing it does not change the store, which is immutable."""
        return decode_attrs(self._store().attrs(), self._where)

    @property
    def allocator(self) -> Allocator:
        """Where this reader's outputs land: the allocator it was bound to, or, for
        a root reader, the host.Allocator it creates on first use."""
        if self._allocator is None:
            from .allocator import host

            with _ROOT_ALLOCATOR_LOCK:  # two first reads must not make two
                if self._allocator is None:
                    self._allocator = host.Allocator()
                    self._owns_allocator = True
        return self._allocator

    @property
    def closed(self) -> bool:
        return self._native is None

    def __len__(self) -> int:
        self._store()
        return self._len

    def __iter__(self) -> Iterator[_BatchT]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, key: Key) -> _BatchT:
        store = self._store()
        pos = _positions(key, self._len)
        if isinstance(pos, int):
            return self._one(store, pos)
        return self._many(store, pos)

    @abstractmethod
    def _one(self, store: _native.Store, pos: int) -> _BatchT: ...

    @abstractmethod
    def _many(self, store: _native.Store, pos: Positions) -> _BatchT: ...

    @abstractmethod
    def _finish(self, store: _native.Store, pending: _native.PendingGather) -> _BatchT: ...

    def prefetch(self, positions: Positions) -> Callable[[], _BatchT] | None:
        """Starts the gather of `positions` and returns at once. A remote store
        sends its requests (or reads its cache) in the background and returns a
        function that waits for them and returns the batch ``gather(positions)``
        would; a local store has nothing to wait for and returns None. The
        Loader uses it to overlap the reads of the steps ahead of the consumer.
        The function's ``cancel()`` stops the requests, and so does dropping it
        uncalled; calling it after ``cancel()`` raises ``StorageError``."""
        if self._remote is None:
            return None
        store = self._store()
        return _Fetching(self, store, store.begin(positions))

    @property
    def url(self) -> str | None:
        """The URL a remote store was opened from; None for a local store."""
        return None if self._remote is None else self._remote.url

    def verify(self, *, progress: ProgressArg = False) -> None:
        """Reads every record and checks it against its checksum; raises
        ZrecordError naming the file and record of the first damaged one.
        `progress` reports the stored bytes checked (see ``loaderx.progress``).
        A remote store's data files are streamed from object storage, bypassing
        the cache."""
        store = self._store()
        if progress is None or progress is False:
            store.verify()
            return
        store.verify_files()
        total = 0
        for start in range(0, self._len, _INDEX_STEP):
            total += int(store.record_sizes(start, min(start + _INDEX_STEP, self._len))[1].sum())
        with _progress.task(
            f"verify {self._path}", total=total, unit="bytes", progress=progress
        ) as p:
            for start in range(0, self._len, _INDEX_STEP):
                stop = min(start + _INDEX_STEP, self._len)
                ends = np.cumsum(store.record_sizes(start, stop)[1])
                # Steps of about _VERIFY_STEP_BYTES, and at least one record each.
                cuts = np.searchsorted(
                    ends, np.arange(_VERIFY_STEP_BYTES, int(ends[-1]), _VERIFY_STEP_BYTES)
                )
                a, done = start, 0
                for b in [*np.unique(cuts + 1 + start).tolist(), stop]:
                    if b <= a:
                        continue
                    store.verify_records(a, b)
                    now = int(ends[b - start - 1])
                    p.advance(now - done)
                    a, done = b, now

    def append(self, data: object) -> NoReturn:
        raise ModeError(
            f"{self._path}: opened for reading; published stores are immutable "
            f"(write a new store with {type(self).__name__}.create)"
        )

    def close(self) -> None:
        """Releases this reader (and the host allocator a root reader created).
        Batches already returned stay valid."""
        self._native = None
        if self._owns_allocator and self._allocator is not None:
            self._allocator.close()

    def __enter__(self) -> Self:
        self._store()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._native is None else f"{self._len} records"
        return f"{type(self).__name__}({self._path!r}, {state})"

    def __reduce__(self) -> tuple[Callable[..., Self], tuple[object, ...]]:
        """Pickles by reference: the store's path, kind, ``checked`` option, header
        checksum and binding. Unpickling reopens the store, refusing with
        ZrecordError one whose header checksum differs, and binds it to a fresh
        allocator of the same configuration (none for a root reader)."""
        if self._native is None:
            raise InvalidArgumentError(
                f"{self._path}: the reader is closed; a closed reader cannot be pickled "
                "(unpickling would reopen a store this reader no longer reads)"
            )
        # A root reader's own host allocator is not a binding: the reopened root
        # reader makes its own on first use.
        bound = None if self._owns_allocator else self._allocator
        return (
            _reopen_reader,
            (
                type(self),
                self._path,
                self._where,
                bool(self._native.checked),
                int(self._native.header_checksum),
                bound,
                self._remote,
            ),
        )


_ReaderT = TypeVar("_ReaderT", bound="_Reader[Any]")


def _reopen_reader(
    cls: type[_ReaderT],
    path: str,
    where: str,
    checked: bool,
    header_checksum: int,
    allocator: Allocator | None,
    remote: _Remote | None = None,
) -> _ReaderT:
    """Unpickles a reader (see ``_Reader.__reduce__``)."""
    if remote is not None:
        native = cls._open_remote(remote)  # pyright: ignore[reportPrivateUsage]
    else:
        native = cls._open_native(where, checked)  # pyright: ignore[reportPrivateUsage]
    found = int(native.header_checksum)
    if found != header_checksum:
        err = ZrecordError(
            f"{where}: the store changed since the reader was pickled (header checksum "
            f"{found:#018x}, pickled {header_checksum:#018x}); a reader reopened from a "
            "pickle reads only the store it was pickled from"
        )
        err.path = where
        raise err
    return cls(native, path, allocator, where=where, remote=remote)


class _Writer:
    """What Dense and Ragged writers share: lifetime and publish."""

    def __init__(
        self, native: _native.Writer, path: str, dtype: np.dtype, codec: str, data_shards: int
    ) -> None:
        self._native = native
        self._path = path
        self._dtype = dtype
        self._codec = codec
        self._data_shards = data_shards

    @property
    def path(self) -> str:
        return self._path

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def codec(self) -> str:
        return self._codec

    @property
    def data_shards(self) -> int:
        return self._data_shards

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __len__(self) -> int:
        """Records appended so far."""
        return len(self._native)

    def _check_open(self) -> None:
        if self._native.closed:
            raise InvalidArgumentError(
                f"{self._path}: the writer is closed; a closed writer cannot append"
            )

    def close(self) -> None:
        """Publishes the store atomically: it appears at ``path`` whole, or not at
        all. Either way the writer is closed afterwards, and closing again does
        nothing. ``PublishedNotDurableError`` (a ``StorageError``) means the store
        WAS published and is readable, but syncing its parent directory failed, so
        its directory entry may not survive a crash; any other error means nothing
        was published and the build directory is gone."""
        self._native.close()

    def abort(self) -> None:
        """Discards everything appended; nothing is published."""
        self._native.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _refuse_read(self, *args: object) -> NoReturn:
        raise ModeError(
            f"{self._path}: a writer cannot be read; close() it, then open the published store"
        )

    __getitem__ = _refuse_read
    __iter__ = _refuse_read

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} records appended"
        return f"{type(self).__name__}({self._path!r}, {state})"


def _create_args(
    path: str | os.PathLike[str],
    dtype: npt.DTypeLike,
    codec: str,
    data_shards: int,
    dict_bytes: bytes | None,
    attrs: dict[str, Any] | None,
) -> tuple[str, np.dtype, int, bytes | None, bytes | None]:
    p = _fspath(path)
    dt = check_dtype(dtype)
    shards = check_int(data_shards, "data_shards", 1, MAX_SHARDS)
    return p, dt, shards, check_codec(codec, dict_bytes), encode_attrs(attrs)


class DenseWriter(_Writer):
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
        blocks = [_host_array(b, "data") for b in _row_blocks(data)]
        for arr in blocks:
            self._check_block(arr)
        for arr in blocks:
            release = isinstance(arr, np.ndarray) and _is_readonly_mapping(arr)
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
    found by its attributes), its shards' arrays in row order, one per row range.
    Such an array has no single buffer to export; its shards each have one."""
    shards = getattr(data, "addressable_shards", None)
    sharding = getattr(data, "sharding", None)
    if shards is None or sharding is None or len(getattr(sharding, "device_set", ())) <= 1:
        return [data]
    shape = tuple(int(d) for d in cast("Sequence[SupportsIndex]", cast(Any, data).shape))
    if not getattr(data, "is_fully_addressable", True):
        raise InvalidArgumentError(
            "data is a sharded array with shards on other processes; each process can "
            "append only what it holds: write one part store per process and publish "
            "them as one with loaderx.zrecord.concat"
        )
    if not shape:
        return [data]
    rows: dict[tuple[int, int], object] = {}
    for shard in cast("Iterable[Any]", shards):
        index = tuple(cast("tuple[slice, ...]", shard.index))
        spans = [s.indices(n)[:2] for s, n in zip(index, shape, strict=True)]
        for axis, (start, stop) in enumerate(spans[1:], 1):
            if (start, stop) != (0, shape[axis]):
                raise InvalidArgumentError(
                    f"data is sharded along axis {axis}; append takes arrays sharded by "
                    f"rows (axis 0) only, without copying: pass np.asarray(data) if one host "
                    f"copy is intended"
                )
        rows.setdefault(spans[0] if spans else (0, shape[0]), shard.data)  # replicas once
    at = 0
    blocks: list[object] = []
    for (start, stop), block in sorted(rows.items()):
        if start != at:
            break
        blocks.append(block)
        at = stop
    if at != shape[0]:
        raise InvalidArgumentError(
            f"the shards of data do not cover its {shape[0]} rows exactly once"
        )
    return blocks


class Dense(_Reader[DLTensor]):
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
        data_shards: int = 4,
        dict_bytes: bytes | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> DenseWriter:
        """Starts a new Dense store at `path`, which must not exist. `attrs`, a
        dict of str keys and JSON values (class names, a tokenizer, the source),
        is stored with it and read back as ``reader.attrs``."""
        p, dt, shards, dct, att = _create_args(path, dtype, codec, data_shards, dict_bytes, attrs)
        shape = check_item_shape(item_shape)
        native = _native.Writer.create_dense(p, dt.name, list(shape), codec, shards, dct, att)
        return DenseWriter(native, p, dt, shape, codec, shards)

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

    def _finish(self, store: _native.Store, pending: _native.PendingGather) -> DLTensor:
        return store.finish_dense(pending, self._native_allocator())

    def gather(self, positions: Positions) -> DLTensor:
        """Batch read of a contiguous 1-D int64/uint64 position array, without
        the dispatch of ``__getitem__``: the loader's hot path."""
        return self._store().gather_dense(positions, self._native_allocator())


def _as_dltensor(a: HostArray) -> DLTensor:
    return a if isinstance(a, DLTensor) else DLTensor._from_array(a)


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
        v = _host_array(values, "values")
        c = _host_array(cu_seqlens, "cu_seqlens")
        s = _host_array(shapes, "shapes")
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
        self._from_readonly_mapping = isinstance(v, np.ndarray) and _is_readonly_mapping(v)

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
        if total > np.iinfo(np.int32).max:
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
        if rebased[-1] > np.iinfo(np.int32).max:
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


class RaggedWriter(_Writer):
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


class Ragged(_Reader[RaggedBatch]):
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
        data_shards: int = 4,
        dict_bytes: bytes | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> RaggedWriter:
        """Starts a new Ragged store at `path`, which must not exist. `attrs` is
        stored with it, as for ``Dense.create``."""
        p, dt, shards, dct, att = _create_args(path, dtype, codec, data_shards, dict_bytes, attrs)
        nd = check_int(ndim, "ndim", 0)
        native = _native.Writer.create_ragged(p, dt.name, nd, codec, shards, dct, att)
        return RaggedWriter(native, p, dt, nd, codec, shards)

    @property
    def ndim(self) -> int:
        """Dimensions of each record."""
        return self._store().ndim

    def _one(self, store: _native.Store, pos: int) -> RaggedBatch:
        return self._many(store, np.array([pos], dtype=np.int64))

    def _many(self, store: _native.Store, pos: Positions) -> RaggedBatch:
        gathered = store.gather_ragged(pos, self._native_allocator())
        return RaggedBatch._trusted(*gathered)  # pyright: ignore[reportPrivateUsage]

    def _finish(self, store: _native.Store, pending: _native.PendingGather) -> RaggedBatch:
        gathered = store.finish_ragged(pending, self._native_allocator())
        return RaggedBatch._trusted(*gathered)  # pyright: ignore[reportPrivateUsage]

    def gather(self, positions: Positions) -> RaggedBatch:
        """Batch read of a contiguous 1-D int64/uint64 position array: the
        loader's hot path."""
        gathered = self._store().gather_ragged(positions, self._native_allocator())
        return RaggedBatch._trusted(*gathered)  # pyright: ignore[reportPrivateUsage]


def clean(path: str | os.PathLike[str]) -> list[str]:
    """Removes the stale build directories directly inside the directory `path`
    and returns their paths.

    A writer builds its store in a hidden sibling ``.NAME.tmp-PID-XXXXXXXX`` and
    renames it into place on ``close()``; a writer killed before that leaves the
    directory behind, and it never opens as a store. Each live writer (or
    ``convert``) holds a lock in its directory until it publishes or discards it,
    so ``clean`` removes only directories whose owner is gone, in any process, and
    is safe to run while writers are at work. Raises ``FileNotFoundError`` when
    `path` does not exist and ``OSError`` when it is not a directory."""
    return [os.fspath(p) for p in _native.clean_stale(_fspath(path))]


@dataclass(frozen=True)
class ConcatResult:
    """What ``concat`` published."""

    path: str
    """Where the store now is."""
    records: int
    """Records in the store: the sum of the sources'."""
    data_files: int
    """Data files in the store: the sum of the sources' ``data_shards``."""
    linked_files: int
    """Data files hard-linked from a source (they share the source's disk space)."""
    copied_files: int
    """Data files copied: ``copy=True``, or a link was refused (a source on another
    filesystem, or a filesystem without hard links)."""
    copied_bytes: int
    """Bytes of the data files copied."""
    header_checksum: int
    """The store's header checksum (its identity, as ``reader.header_checksum``)."""


def concat(
    sources: Iterable[str | os.PathLike[str]],
    dest: str | os.PathLike[str],
    *,
    attrs: dict[str, Any] | None = None,
    verify: bool = False,
    copy: bool = False,
    progress: ProgressArg = False,
) -> ConcatResult:
    """Publishes at `dest` one store holding the records of `sources`, in order,
    without decoding or recompressing a record.

    The sources must share one schema: kind, dtype, item shape (Dense) or ndim
    (Ragged), codec, and for ``zstd_dict`` the dictionary; a mismatch is an
    InvalidArgumentError naming the source and the field. Their ``data_shards``
    may differ: the result holds every source's data files, at most 255 in all
    (write parts with ``data_shards=1`` to concatenate up to 255 of them). Data
    files are hard-linked into the result where the filesystem allows and copied
    otherwise (``copy=True`` always copies); the result says which.

    Attributes: without `attrs`, every source must hold the same attributes, byte
    for byte (the same ``attrs=`` given to each part's ``create``), or none, and
    the result gets them; with `attrs`, the result gets exactly those (``{}``:
    none), whatever the sources hold.

    Each source is checked as opening checks it, and every index entry as a read
    checks it. ``verify=True`` also checks every record's stored bytes against
    its checksum and decodes it (as ``verify()`` does) before its data is taken,
    which reads every byte of every source.

    `progress` reports the records done (see ``loaderx.progress``); an exception
    a callback raises stops the concatenation and propagates. Nothing is
    published unless everything succeeds; an existing `dest` is
    StoreExistsError."""
    if isinstance(sources, (str, bytes, os.PathLike)):
        raise TypeError("sources must be a collection of store paths, not one path")
    paths = [_fspath(p) for p in sources]
    target = _fspath(dest)
    for name, flag in (("verify", verify), ("copy", copy)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(
            "progress must be a bool, None or a callable taking a ProgressEvent, "
            f"got {type(progress).__name__}"
        )
    # None: the sources' own; b"": none at all.
    raw_attrs = None if attrs is None else (encode_attrs(attrs) or b"")
    task: _progress.Task | None = None

    def report(done: int, total: int) -> None:
        nonlocal task
        if task is None:  # the total is known once the sources are open
            task = _progress.task(
                f"concat {target}", total=total, unit="records", progress=progress
            )
        if done > task.done:
            task.advance(done - task.done)

    quiet = progress is None or progress is False
    try:
        native = _native.concat(paths, target, raw_attrs, verify, copy, None if quiet else report)
    except BaseException:
        if task is not None:
            task.close(finished=False)
        raise
    if task is not None:
        task.close()
    path, records, data_files, linked, copied, copied_bytes, checksum = native
    return ConcatResult(
        os.fspath(path), records, data_files, linked, copied, copied_bytes, checksum
    )


def upload(
    store: str | os.PathLike[str],
    url: str,
    *,
    storage_options: StorageOptions | None = None,
    overwrite: bool = False,
) -> None:
    """Uploads the published local store at `store` to `url` in object storage.

    Every file but the header goes up first, each checked for its size once
    there; the header, which readers read first and which names every other
    file's size and checksum, goes up last. A reader therefore finds either no
    store or a whole one. A store already at `url` is StoreExistsError unless
    ``overwrite=True``, which first removes its header (readers then find no
    store until the new header lands). Check the local store with ``verify()``
    first if it may be damaged: upload copies bytes, it does not check them."""
    local = _fspath(store)
    if not isinstance(url, str) or not _native.is_url(url):
        raise InvalidArgumentError(f"upload needs a store URL (s3://, gs://, ...), got {url!r}")
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be a bool, got {type(overwrite).__name__}")
    _native.upload(local, url, list(_storage_options(storage_options)), overwrite)
