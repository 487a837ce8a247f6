"""Whole-store tools: opening a store of either kind, concatenating stores,
uploading one, and cleaning up after killed writers."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _native
from .. import progress as _progress
from .._schema import encode_attrs, fspath
from ..errors import InvalidArgumentError, ZrecordError
from ._dense import Dense
from ._ragged import Ragged
from ._reader import open_native
from ._remote import Cache, native_options, option_pairs, url_text

if TYPE_CHECKING:
    from ..progress import ProgressArg
    from ._options import StorageOptions

_KINDS: dict[str, type[Dense] | type[Ragged]] = {"dense": Dense, "ragged": Ragged}


def open(
    path: str | os.PathLike[str],
    *,
    checked: bool = False,
    storage_options: StorageOptions | None = None,
    cache: Cache | str | os.PathLike[str] | None = None,
) -> Dense | Ragged:
    """Opens the published store at `path` (or URL) as the reader of its kind: a
    ``Dense`` for a Dense store, a ``Ragged`` for a Ragged one. The options are
    those of ``Dense.open``."""
    native, p, remote = open_native(path, checked, storage_options, cache)
    cls = _KINDS.get(native.kind)
    if cls is None:
        raise ZrecordError(f"{p}: holds a store of kind {native.kind!r}, which no reader reads")
    return cls(native, p, remote=remote)


#: How often an engine write's driver rewrites the heartbeat in its job prefix
#: in object storage, in seconds.
JOB_HEARTBEAT_S: float = 10.0
#: How old, by default, the newest object of a job prefix must be for ``clean``
#: of a URL to take its driver for gone, in seconds: sixty missed heartbeats.
JOB_STALE_S: float = 600.0


def clean(
    path: str | os.PathLike[str],
    *,
    older_than: float | None = None,
    storage_options: StorageOptions | None = None,
) -> list[str]:
    """Removes the stale build directories directly inside the directory `path`
    and returns their paths; for a URL, the job prefixes that engine writes
    whose driver is gone left directly under it.

    A writer builds its store in a hidden sibling ``.NAME.tmp-PID-XXXXXXXX`` and
    renames it into place on ``close()``; a writer killed before that leaves the
    directory behind, and it never opens as a store. Each live writer (or
    ``convert``) holds a lock in its directory until it publishes or discards it,
    so ``clean`` removes only directories whose owner is gone, in any process, and
    is safe to run while writers are at work. Raises ``FileNotFoundError`` when
    `path` does not exist and ``OSError`` when it is not a directory.

    For a URL (``s3://``, ``gs://``, ``file://``...; `storage_options` as for
    ``Dense.open``), it removes instead the job prefixes
    ``.parts-XXXXXXXXXXXX/`` that ``loaderx.spark.write`` or
    ``loaderx.ray.write`` into that root left when their driver was killed, and
    returns their URLs. A live driver rewrites a heartbeat object in its prefix
    every ``JOB_HEARTBEAT_S`` (10) seconds, so a prefix whose newest object is
    at least `older_than` seconds old (default ``JOB_STALE_S``, 600) has no
    driver; the age is the storage's modification time against this machine's
    clock, so `older_than` must exceed the heartbeat interval and any
    difference between the two clocks. Nothing else under the root is touched."""
    if isinstance(path, str) and _native.is_url(path):
        age = JOB_STALE_S if older_than is None else older_than
        if isinstance(age, bool) or not isinstance(age, (int, float)) or not 0 <= age < 1e12:
            raise InvalidArgumentError(f"older_than={older_than!r}: a number of seconds >= 0")
        options = native_options(option_pairs(storage_options))
        return _native.clean_jobs(url_text(path).rstrip("/"), float(age), options)
    if older_than is not None or storage_options is not None:
        raise InvalidArgumentError(
            f"older_than= and storage_options= are for a URL, and {path!r} is a local path "
            "(its build directories are removed once no live writer holds their lock)"
        )
    return [os.fspath(p) for p in _native.clean_stale(fspath(path))]


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
    may differ: the result holds every source's data files, at most
    ``MAX_DATA_FILES`` (16,384) in all; past 255 the result is in format version
    3 (write parts with ``data_shards=1`` for one data file per part). Data
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
    paths = [fspath(p) for p in sources]
    target = fspath(dest)
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
    local = fspath(store)
    if not isinstance(url, str) or not _native.is_url(url):
        raise InvalidArgumentError(f"upload needs a store URL (s3://, gs://, ...), got {url!r}")
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be a bool, got {type(overwrite).__name__}")
    _native.upload(local, url_text(url), native_options(option_pairs(storage_options)), overwrite)
