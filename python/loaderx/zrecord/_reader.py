"""What Dense and Ragged readers share: opening, lifetime, metadata, index
dispatch, sizes and statistics, verify and pickling by reference."""

from __future__ import annotations

import io
import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, NoReturn, TypeVar

import numpy as np

from .. import _native
from .. import progress as _progress
from .._schema import check_int, decode_attrs, fspath, numpy_dtype
from ..errors import InvalidArgumentError, ZrecordError
from ._keys import positions
from ._remote import Cache, Remote, cache_arg, option_pairs, url_text

if TYPE_CHECKING:
    import numpy.typing as npt
    from typing_extensions import Self

    from ..allocator import Allocator
    from ..progress import ProgressArg
    from ..protocols import Positions
    from ._keys import Key
    from ._options import StorageOptions

_BatchT = TypeVar("_BatchT")  # what a reader's gather returns

# Records whose sizes one native call reads from the index, and the stored bytes
# one step of a verify with progress checks: the format's own step sizes.
INDEX_STEP: int = _native.SIZES_STEP_RECORDS
VERIFY_STEP_BYTES: int = _native.VERIFY_STEP_BYTES

_ROOT_ALLOCATOR_LOCK = threading.Lock()

# The host allocators root readers created and closed with themselves, and the
# store each was for, so that a view bound to one says why it no longer reads.
_CLOSED_WITH: weakref.WeakKeyDictionary[Allocator, str] = weakref.WeakKeyDictionary()


class ModeError(io.UnsupportedOperation, TypeError):
    """Reading a writer or writing a reader."""


class RecordSizes(NamedTuple):
    """The sizes of a run of records, from the index: one entry per record."""

    logical: npt.NDArray[np.uint64]
    """Bytes of each record as an array (what ``raw`` stores)."""
    stored: npt.NDArray[np.uint64]
    """Bytes each record takes in its data file."""


class Traffic(NamedTuple):
    """What a reader's store moved in this process since it was opened (shared
    by its ``bind`` views and copies of the same open store)."""

    fetched: int
    """Response bytes fetched from object storage (0 for a local store)."""
    from_cache: int
    """Bytes read from the block cache instead of fetched."""


@dataclass(frozen=True)
class StoreStats:
    """What a store holds, from its header and index; no record is read."""

    records: int
    logical_bytes: int
    """Bytes of every record as an array: what gathering them all returns."""
    stored_bytes: int
    """Bytes the records take in the data files."""
    data_files: int
    data_file_bytes: int
    """Bytes of the data files (the records and any space between them)."""
    dictionary_bytes: int
    """Bytes of the zstd dictionary (``zstd_dict``), else 0."""


class _Fetching(Generic[_BatchT]):
    """A begun gather: calling it waits for the records and returns the batch
    (once); ``cancel()`` stops what has not happened yet (a remote store's
    requests, a local gather not started), even while another thread waits in
    the call."""

    __slots__ = ("_pending", "_reader", "_store", "_tally")

    def __init__(
        self,
        reader: StoreReader[_BatchT],
        store: _native.Store,
        pending: _native.PendingGather,
        tally: _native.Tally | None,
    ) -> None:
        self._reader, self._store, self._pending, self._tally = reader, store, pending, tally

    def __call__(self) -> _BatchT:
        reader = self._reader
        try:
            return reader._finish(self._store, self._pending, self._tally)  # pyright: ignore[reportPrivateUsage]
        except InvalidArgumentError:
            # A gather finished after its reader's close() finds the allocator
            # closed with it: say so naming the reader, as a read would.
            if reader._native is None:  # pyright: ignore[reportPrivateUsage]
                raise InvalidArgumentError(
                    f"{reader._path}: the store was closed before this gather finished"  # pyright: ignore[reportPrivateUsage]
                ) from None
            reader._native_allocator()  # pyright: ignore[reportPrivateUsage]
            raise

    def cancel(self) -> None:
        self._pending.cancel()

    @property
    def ready(self) -> bool:
        """Whether calling it would not wait."""
        return self._pending.ready

    @property
    def work_ns(self) -> int | None:
        """Nanoseconds the background gather thread spent on a local gather,
        once it ran; None otherwise."""
        return self._pending.work_ns


def open_native(
    path: str | os.PathLike[str],
    checked: bool,
    options: StorageOptions | None,
    cache: Cache | str | os.PathLike[str] | None,
) -> tuple[_native.Store, str, Remote | None]:
    """The native store at `path` or URL, the path as a str, and for a URL what
    reopens it."""
    p = fspath(path)
    if not isinstance(checked, bool):
        raise TypeError(f"checked must be a bool, got {type(checked).__name__}")
    if _native.is_url(p):
        remote = Remote(url_text(p), option_pairs(options), cache_arg(cache))
        return remote.open(), p, remote
    if options is not None or cache is not None:
        raise InvalidArgumentError(
            f"{p}: storage_options and cache apply to store URLs (s3://, gs://, az://, "
            "http(s)://, file://), not to local paths"
        )
    return _native.Store.open(p, checked), p, None


class StoreReader(ABC, Generic[_BatchT]):
    """What Dense and Ragged readers share: lifetime, metadata and index dispatch."""

    _kind = ""

    def __init__(
        self,
        native: _native.Store,
        path: str,
        allocator: Allocator | None = None,
        *,
        where: str | None = None,
        remote: Remote | None = None,
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
        native, p, remote = open_native(path, checked, storage_options, cache)
        return cls(cls._check_kind(native, p), p, remote=remote)

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

    def _native_allocator(self) -> _native.Allocator:
        allocator = self._allocator or self.allocator
        if allocator.closed:
            closer = _CLOSED_WITH.get(allocator)
            why = (
                "the allocator it writes into is closed"
                if closer is None
                else f"the host allocator it writes into was closed with the reader of {closer} "
                "that created it; bind views to an allocator of your own to read after "
                "closing that reader"
            )
            raise InvalidArgumentError(f"{self._path}: {why}")
        # Readers are the one user of an allocator's native pool.
        return allocator._native  # pyright: ignore[reportPrivateUsage]

    def bind(self, allocator: Allocator) -> Self:
        """A view of the same store whose outputs land in `allocator`'s memory."""
        from ..allocator import Allocator

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
    def dtype_name(self) -> str:
        """The element type's name (``"float32"``, ``"bfloat16"``...), which,
        unlike ``dtype``, needs no ml_dtypes."""
        return self._store().dtype

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
        """How many data files the store's records are spread over."""
        return self._store().data_shards

    @property
    def attrs(self) -> dict[str, Any]:
        """The attributes given at creation (``{}`` for none), as a fresh dict on
        every access: changing it does not change the store, which is immutable."""
        return decode_attrs(self._store().attrs(), self._where)

    @property
    def dictionary(self) -> bytes | None:
        """The zstd dictionary of a ``zstd_dict`` store; None for other codecs."""
        return self._store().dictionary()

    @property
    def data_file_sizes(self) -> tuple[int, ...]:
        """The size in bytes of each data file, in order."""
        return tuple(self._store().data_file_sizes)

    @property
    def index_bytes(self) -> int:
        """The size in bytes of the index: one entry per record (known at open;
        nothing is read)."""
        return self._store().index_bytes

    def record_sizes(self, start: int = 0, stop: int | None = None) -> RecordSizes:
        """The logical and stored size of each record in ``start..stop`` (default:
        every record), read from the index; no record is read. A remote store
        fetches (or finds in memory or its cache) the index blocks of the range
        only."""
        store = self._store()
        begin = check_int(start, "start", 0, self._len)
        end = self._len if stop is None else check_int(stop, "stop", begin, self._len)
        parts = [
            store.record_sizes(a, min(a + INDEX_STEP, end)) for a in range(begin, end, INDEX_STEP)
        ]
        if not parts:
            return RecordSizes(np.empty(0, np.uint64), np.empty(0, np.uint64))
        if len(parts) == 1:
            return RecordSizes(*parts[0])
        return RecordSizes(
            np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        )

    def stats(self) -> StoreStats:
        """The store's sizes: records, their logical and stored bytes, its data
        files and dictionary. Reads the whole index (16 bytes per record), a step
        at a time: on a remote store, that is fetching it (or reading it from the
        cache)."""
        store = self._store()
        logical = stored = 0
        for a in range(0, self._len, INDEX_STEP):
            lg, st = store.record_sizes(a, min(a + INDEX_STEP, self._len))
            logical += int(lg.sum())
            stored += int(st.sum())
        files = store.data_file_sizes
        return StoreStats(
            records=self._len,
            logical_bytes=logical,
            stored_bytes=stored,
            data_files=len(files),
            data_file_bytes=sum(files),
            dictionary_bytes=len(store.dictionary() or b""),
        )

    @property
    def allocator(self) -> Allocator:
        """Where this reader's outputs land: the allocator it was bound to, or, for
        a root reader, the host.Allocator it creates on first use."""
        if self._allocator is None:
            from ..allocator import host

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
        pos = positions(key, self._len)
        if isinstance(pos, int):
            return self._one(store, pos)
        return self._many(store, pos)

    @abstractmethod
    def _one(self, store: _native.Store, pos: int) -> _BatchT: ...

    @abstractmethod
    def _many(self, store: _native.Store, pos: Positions) -> _BatchT: ...

    @abstractmethod
    def _finish(
        self, store: _native.Store, pending: _native.PendingGather, tally: _native.Tally | None
    ) -> _BatchT: ...

    @abstractmethod
    def _gather_counted(self, positions: Positions, tally: _native.Tally | None) -> _BatchT:
        """``gather(positions)``, adding the batch's payload bytes to `tally`."""

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
        return self._begin(positions, None)

    def _begin(self, positions: Positions, tally: _native.Tally | None) -> _Fetching[_BatchT]:
        """Starts the gather of `positions` and returns what finishes it: a
        local store's gather runs on the background gather thread, behind the
        gathers begun before it; a remote store's requests are sent. The batch's
        payload bytes are added to `tally` when it is finished."""
        store = self._store()
        return _Fetching(self, store, store.begin(positions, self._native_allocator()), tally)

    def _warm(self, positions: Positions) -> int:
        """Begins fetching, in the background, the blocks a gather of
        `positions` will need (into memory and the block cache), and returns
        at once; no gather's values change. Returns how many steps the call
        covers, this one first: 0 when nothing was begun (the store's blocks
        fetched ahead and not yet used fill its ``read_ahead_bytes``, enough
        warms run, or the last warm to end found every block held and those
        still running will tell whether that holds) and the caller asks again
        later, for the same step; ``n > 1`` when the warms before found every
        block held, so that the next ``n - 1`` steps need no warm either. The
        Loader calls it for the steps beyond those it has begun."""
        return self._store().warm(positions)

    def _cancel_warm(self) -> None:
        """Stops what ``_warm`` began; a no-op on a closed reader."""
        if self._native is not None:
            self._native.cancel_warm()

    @property
    def url(self) -> str | None:
        """The URL a remote store was opened from; None for a local store."""
        return None if self._remote is None else self._remote.url

    def traffic(self) -> Traffic:
        """The bytes this reader's store fetched from object storage and read
        from its block cache in this process: zeros for a local store."""
        return Traffic(*self._store().traffic())

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
        total = self.stats().stored_bytes
        with _progress.task(
            f"verify {self._path}", total=total, unit="bytes", progress=progress
        ) as p:
            for start in range(0, self._len, INDEX_STEP):
                stop = min(start + INDEX_STEP, self._len)
                ends = np.cumsum(store.record_sizes(start, stop)[1])
                # Steps of about VERIFY_STEP_BYTES, and at least one record each.
                cuts = np.searchsorted(
                    ends, np.arange(VERIFY_STEP_BYTES, int(ends[-1]), VERIFY_STEP_BYTES)
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
            _CLOSED_WITH[self._allocator] = self._path
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
            reopen_reader,
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


_ReaderT = TypeVar("_ReaderT", bound="StoreReader[Any]")


def reopen_reader(
    cls: type[_ReaderT],
    path: str,
    where: str,
    checked: bool,
    header_checksum: int,
    allocator: Allocator | None,
    remote: Remote | None = None,
) -> _ReaderT:
    """Unpickles a reader (see ``StoreReader.__reduce__``)."""
    native = remote.open() if remote is not None else _native.Store.open(where, checked)
    native = cls._check_kind(native, where)  # pyright: ignore[reportPrivateUsage]
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
