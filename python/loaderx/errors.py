"""The exceptions loaderx raises.

Every class derives from :class:`LoaderxError` and from the standard exception
that describes the same kind of failure, so ``except LoaderxError`` catches
everything loaderx raises on purpose while ``except ValueError``,
``except IndexError`` or ``except OSError`` keep working as usual.

============================ ===================== ========================================
class                        also a                raised when
============================ ===================== ========================================
``InvalidArgumentError``     ``ValueError``        an argument breaks the contract, or an
                                                   object is used after ``close()``
``OutOfRangeError``          ``IndexError``        a position is outside ``0..len-1``
``StoreNotFoundError``       ``FileNotFoundError`` nothing is at the path to open
``StoreExistsError``         ``FileExistsError``   the path to create already exists
``ZrecordError``             ``ValueError``        a store is damaged or of an unknown
                                                   format (``path``, ``record`` say where)
``StorageError``             ``OSError``           the operating system refused a read or
                                                   write (``errno``, ``filename``)
``PublishedNotDurableError`` ``StorageError``      a store WAS published, but syncing its
                                                   directory failed; do not create it again
``OutOfMemoryError``         ``MemoryError``       an output or scratch allocation failed
``DeviceError``              ``RuntimeError``      a GPU runtime failed to load or call
``MissingDependencyError``   ``ImportError``       an optional package a call needs is
                                                   not installed (``name`` names it)
``InternalError``            ``RuntimeError``      a bug in loaderx; please report it
============================ ===================== ========================================

Two kinds of mistake keep the plain built-in class: type mistakes (passing a list
where an integer is wanted) are ``TypeError``, and calls in the wrong order or the
wrong process (``load_state_dict`` after the first ``next()``, a loader used in a
forked child) are ``RuntimeError``.
"""

from __future__ import annotations

import os

__all__ = [
    "DeviceError",
    "InternalError",
    "InvalidArgumentError",
    "LoaderxError",
    "MissingDependencyError",
    "OutOfMemoryError",
    "OutOfRangeError",
    "PublishedNotDurableError",
    "StorageError",
    "StoreExistsError",
    "StoreNotFoundError",
    "ZrecordError",
]


class LoaderxError(Exception):
    """Base class of every exception loaderx raises on purpose."""


class InvalidArgumentError(LoaderxError, ValueError):
    """An argument's value breaks the contract; the message names it."""


class OutOfRangeError(LoaderxError, IndexError):
    """A record position outside ``0..len-1``."""


class StoreNotFoundError(LoaderxError, FileNotFoundError):
    """No store (or no file a store needs) at the given path."""


class StoreExistsError(LoaderxError, FileExistsError):
    """The destination of a new store already exists; stores are never replaced."""


class ZrecordError(LoaderxError, ValueError):
    """A store on disk is damaged, incomplete, or of a format this version does
    not read. ``path`` names the file and ``record`` the record (or ``None``)."""

    path: os.PathLike[str] | str | None = None
    record: int | None = None


class StorageError(LoaderxError, OSError):
    """The operating system refused a read or write (disk full, permissions...)."""


class PublishedNotDurableError(StorageError):
    """A store WAS published: it is complete, readable, and at ``filename``. Only
    the final fsync of the directory holding it failed, so its directory entry may
    not survive a crash or power loss. The writer counts as closed (closing again
    does nothing); creating the store again would fail, as it exists. Sync the
    directory yourself (or check after a restart that the store is there)."""


class OutOfMemoryError(LoaderxError, MemoryError):
    """Memory for an output or a scratch buffer could not be allocated."""


class DeviceError(LoaderxError, RuntimeError):
    """A GPU runtime could not be loaded, or one of its calls failed."""


class MissingDependencyError(LoaderxError, ImportError):
    """An optional package that this call needs is not installed (``ml_dtypes``
    for ``bfloat16`` and the float8 dtypes). ``name`` is the module's name and
    the message says how to install it."""


class InternalError(LoaderxError, RuntimeError):
    """A bug: an invariant of loaderx did not hold. Please report it."""
