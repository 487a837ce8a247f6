"""The Hugging Face Hub: a dataset repository resolved to an immutable commit
and loaded from the hub cache, and ``convert``'s sources named by path or id."""

from __future__ import annotations

import errno
import os
import sys
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from .. import errors
from ..errors import InvalidArgumentError, MissingDependencyError, StorageError
from ._files import check_regular_files

if TYPE_CHECKING:
    from datasets import (  # pyright: ignore[reportMissingTypeStubs]
        Dataset,
        DatasetDict,
    )


# Where each Dataset that huggingface() returned came from, for its stores'
# attributes. Weak: a dataset derived with map() or select() is a new object and
# keeps only what datasets itself records.
HUB_SOURCES: weakref.WeakKeyDictionary[object, dict[str, str]] = weakref.WeakKeyDictionary()


_NETWORK_ERRORS = frozenset(
    {
        "TransportError",
        "NetworkError",
        "ConnectError",
        "ConnectTimeout",
        "TimeoutException",
        "ProxyError",
        "ConnectionError",
        "Timeout",
        "SSLError",
    }
)


def _is_network_error(e: BaseException) -> bool:
    """Whether `e` says the endpoint could not be reached (as opposed to an answer
    from it, such as an unknown repository)."""
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    return any(t.__name__ in _NETWORK_ERRORS for t in type(e).__mro__)


def _cause(e: BaseException) -> str:
    """The innermost message of a chain of wrapped network errors, on one line."""
    while e.__cause__ is not None:
        e = e.__cause__
    return " ".join(str(e).split()) or type(e).__name__


def huggingface(
    repo: str,
    *,
    config: str | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> DatasetDict:
    """The ``DatasetDict`` of the dataset repository `repo` at `revision` (default:
    the main branch), configuration `config`.

    Online, the revision is first resolved to its immutable commit, and that
    commit's snapshot is downloaded into the hub cache (`cache_dir`, default
    huggingface_hub's). `endpoint` selects a mirror or a private Hub and `token`
    authorizes private or gated repositories, without touching the process
    environment.

    Offline (``HF_HUB_OFFLINE=1``) or when the endpoint cannot be reached, the
    revision's snapshot is taken from the hub cache if it is there, with a one-line
    notice on stderr naming the commit; otherwise a ``StorageError`` says which
    endpoint failed and what to try. The network error stays on the exception's
    ``__context__`` without being printed."""
    try:
        # Both type most of their API; the rest (snapshot_download's keywords,
        # load_dataset's) is what pyright calls unknown.
        import datasets  # pyright: ignore[reportMissingTypeStubs]
        from huggingface_hub import (
            HfApi,
            constants,
            snapshot_download,  # pyright: ignore[reportUnknownVariableType]
        )
        from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled
    except ImportError as e:
        raise MissingDependencyError(
            "huggingface needs the converter extra: run `pip install -e '.[converter]'` in the "
            "loaderx checkout",
            name=e.name,
        ) from e
    ep = endpoint or constants.ENDPOINT
    cache = None if cache_dir is None else os.fspath(cache_dir)
    wanted = revision or "main"
    offline = bool(constants.HF_HUB_OFFLINE)
    unreachable: BaseException | None = None
    commit: str | None = None
    if not offline:
        try:
            commit = HfApi(endpoint=endpoint, token=token).dataset_info(repo, revision=revision).sha
        except OfflineModeIsEnabled:
            offline = True
        except Exception as e:
            if not _is_network_error(e):
                raise
            unreachable = e
    if commit is not None:
        try:
            local = snapshot_download(
                repo,
                repo_type="dataset",
                revision=commit,
                endpoint=endpoint,
                token=token,
                cache_dir=cache,
            )
        except Exception as e:
            if not _is_network_error(e):
                raise
            raise StorageError(
                f"{repo}: the download of commit {commit} from {ep} failed ({_cause(e)}); "
                "check the network or proxy and call huggingface() again (finished files "
                "stay in the hub cache)"
            ) from None
    else:
        try:
            local = snapshot_download(
                repo,
                repo_type="dataset",
                revision=wanted,
                cache_dir=cache,
                local_files_only=True,
            )
        except LocalEntryNotFoundError:
            where = cache or constants.HF_HUB_CACHE
            if unreachable is not None:
                raise StorageError(
                    f"{repo}: cannot reach the Hub at {ep} ({_cause(unreachable)}) and revision "
                    f"{wanted!r} is not in the hub cache ({where}): check the network or proxy "
                    "(HTTPS_PROXY) or pass endpoint= a reachable mirror; once it is cached, "
                    "HF_HUB_OFFLINE=1 skips the network; or convert a local copy "
                    "(datasets.load_from_disk of a save_to_disk directory)"
                ) from None
            raise StorageError(
                f"{repo}: HF_HUB_OFFLINE is set and revision {wanted!r} is not in the hub "
                f"cache ({where}): download it once with network access, or convert a local "
                "copy (datasets.load_from_disk of a save_to_disk directory)"
            ) from None
        commit = os.path.basename(os.path.normpath(local))
        why = "offline (HF_HUB_OFFLINE)" if unreachable is None else f"{ep} unreachable"
        print(
            f"loaderx.huggingface: {why}: using the cached snapshot {commit} of {repo} "
            f"(revision {wanted!r})",
            file=sys.stderr,
            flush=True,
        )
    loaded = datasets.load_dataset(local, config)  # pyright: ignore[reportUnknownMemberType]
    for split, ds in cast("Mapping[str, object]", loaded).items():
        HUB_SOURCES[ds] = {
            "hub_repo": repo,
            "hub_revision": wanted,
            "hub_commit": commit,
            "hub_endpoint": ep,
            "config": config or "",
            "split": split,
        }
    return loaded


def _is_repo_id(name: str) -> bool:
    """Whether `name` can be a Hub dataset id (``name`` or ``owner/name``), as
    huggingface_hub checks it; a path such as ``/data/x`` or ``./x`` cannot."""
    try:
        from huggingface_hub.utils import validate_repo_id
    except ImportError:  # huggingface() says which extra is missing
        return True
    try:
        validate_repo_id(name)
    except ValueError:  # HFValidationError
        return False
    return True


def load_source(
    source: str | os.PathLike[str], *, config: str | None = None, revision: str | None = None
) -> Dataset | DatasetDict:
    """The dataset `source` names, for ``convert``: a directory written by
    ``save_to_disk`` (a ``Dataset`` or ``DatasetDict``), a ``.parquet`` file, an
    ``.arrow`` file as ``datasets`` writes them (Arrow IPC stream), or, when no
    such path exists, a Hub dataset id fetched with :func:`huggingface` (`config`
    and `revision` apply to it)."""
    try:
        import datasets  # pyright: ignore[reportMissingTypeStubs]
    except ImportError as e:
        raise ImportError(
            "load_source needs the converter extra: run `pip install -e '.[converter]'` in the "
            "loaderx checkout"
        ) from e
    path = os.fspath(source)
    if os.path.lexists(path) or path.endswith((".parquet", ".arrow")) or not _is_repo_id(path):
        if not os.path.exists(path):
            raise errors.StoreNotFoundError(
                errno.ENOENT, f"{path}: no such file or directory", path
            )
        check_regular_files(path)
        if os.path.isdir(path):
            return datasets.load_from_disk(path)  # pyright: ignore[reportUnknownMemberType]
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq
            from datasets.table import InMemoryTable  # pyright: ignore[reportMissingTypeStubs]

            # pyarrow's stubs leave some of read_table's parameters untyped.
            table = pq.read_table(path, memory_map=True)  # pyright: ignore[reportUnknownMemberType]
            return datasets.Dataset(InMemoryTable(table))
        if path.endswith(".arrow"):
            return datasets.Dataset.from_file(path)
        raise InvalidArgumentError(
            f"{path}: not a save_to_disk directory, a .parquet or an .arrow file"
        )
    return huggingface(path, config=config, revision=revision)
