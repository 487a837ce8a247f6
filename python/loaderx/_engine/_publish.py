"""The driver's side of an engine write: from the one committed part of each
partition, one store per column, published all at once; or nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Generator, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

from .. import _native
from .._schema import encode_attrs
from ..errors import InternalError, StoreExistsError
from ..zrecord import Dense, Ragged, concat, upload
from ..zrecord._remote import native_options, option_pairs
from ..zrecord._tools import JOB_HEARTBEAT_S
from ._heartbeat import Heartbeat
from ._part import Part
from ._plan import Job

#: The directory inside the build directory that the tasks write parts into.
PARTS_DIR: str = _native.PARTS_DIR
#: The driver's heartbeat object in a job prefix in object storage.
HEARTBEAT_FILE = "heartbeat"
#: Longest a failed local write goes on removing what tasks of the failed job,
#: not stopped yet by their engine, add to its build directory.
LATE_TASKS_S = 10.0


@dataclass(frozen=True)
class EngineWrite:
    """What an engine write published; ``os.fspath`` of it is its root."""

    path: str
    #: The column names, one store each, at ``path/<column>``.
    columns: tuple[str, ...]
    #: Records in every column's store.
    records: int
    #: Partitions (tasks) whose part was published, empty ones included.
    parts: int
    #: Data files of each column's store: one per non-empty part.
    data_files: int

    def __fspath__(self) -> str:
        return self.path

    def store(self, column: str) -> str:
        """The path of one column's store."""
        if column not in self.columns:
            raise KeyError(column)
        return os.path.join(self.path, column)


def chosen_parts(parts: Iterable[Part]) -> list[Part]:
    """The parts in partition order, checked to be one per partition 0..n-1."""
    out = sorted(parts, key=lambda p: p.partition)
    for k, p in enumerate(out):
        if p.partition != k:
            raise InternalError(
                f"the engine reported partitions {[q.partition for q in out]}; each of "
                f"0..{len(out) - 1} must be reported exactly once"
            )
    return out


@contextmanager
def local_build(dest: str) -> Generator[tuple[_native.BuildDir, str]]:
    """The build directory of a local write and its parts directory; discarded
    on any error, so a failed job leaves nothing (and a killed driver leaves a
    build directory that ``loaderx.zrecord.clean`` removes)."""
    if os.path.lexists(dest):
        raise StoreExistsError(f"{dest}: already exists; a write makes a new path")
    build = _native.BuildDir(dest)
    path = os.fspath(build.path)
    parts = os.path.join(path, PARTS_DIR)
    try:
        os.mkdir(parts)
        yield build, parts
    except BaseException:
        # Renamed first: a task of the failed job still writing finds no
        # directory at the paths it knows, and adds nothing more to remove.
        try:
            os.rename(parts, parts + ".discarded")
        except OSError:
            pass
        build.discard()
        _remove_after_late_tasks(path)
        raise


def _remove_after_late_tasks(path: str) -> None:
    """Removes what is left of the discarded build directory `path`. An engine
    reports a failed job before it has stopped the job's other tasks, and a
    task writing its part meanwhile (into a file it opened before its parts
    directory was renamed away) can fill a directory between the removal's
    look into it and its removal, which then fails and leaves the build
    directory. So the removal is repeated while anything is left, for at most
    `LATE_TASKS_S`."""
    until = time.monotonic() + LATE_TASKS_S
    while os.path.lexists(path) and time.monotonic() < until:
        shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(path):
            time.sleep(0.01)


def _empty_store(job: Job, column: int, path: str) -> None:
    plan = job.plans[column]
    assert plan.dtype is not None
    attrs = job.attrs[plan.column]
    if plan.kind == "dense":
        assert plan.shape is not None
        w = Dense.create(
            path, plan.dtype, plan.shape, codec=plan.codec, data_shards=1,
            dict_bytes=plan.dictionary, attrs=attrs,
        )  # fmt: skip
    else:
        w = Ragged.create(
            path, plan.dtype, ndim=plan.ndim, codec=plan.codec, data_shards=1,
            dict_bytes=plan.dictionary, attrs=attrs,
        )  # fmt: skip
    w.close()


def publish_local(job: Job, build: _native.BuildDir, parts: list[Part]) -> EngineWrite:
    """Concatenates each column's parts (hard links, the index rewritten) and
    publishes the root."""
    tmp = os.fspath(build.path)
    used = [p for p in parts if p.records]
    total = sum(p.records for p in parts)
    for k, plan in enumerate(job.plans):
        dest = os.path.join(tmp, plan.column)
        if used:
            sources = [os.path.join(job.parts, p.name, plan.column) for p in used]
            result = concat(sources, dest, attrs=job.attrs[plan.column])
            if result.records != total:
                raise InternalError(f"{plan.column}: {result.records} records for {total} rows")
        else:
            _empty_store(job, k, dest)
    shutil.rmtree(job.parts)
    build.publish()
    return EngineWrite(job.dest, job.columns, total, len(parts), len(used))


def _options(job: Job) -> dict[str, Any]:
    return native_options(option_pairs(cast("Any", job.storage_options)))


@contextmanager
def remote_build(job: Job) -> Generator[None]:
    """Sets `job.parts` to a prefix of this job's own beside the result, keeps
    a heartbeat in it while the job runs, and removes everything under it when
    the job ends, whether it published or not (a driver killed meanwhile leaves
    it, which ``loaderx.zrecord.clean(root)`` removes once its heartbeat is old)."""
    job.parts = f"{job.dest}/{PARTS_DIR}-{uuid.uuid4().hex[:12]}"
    beat = Heartbeat(f"{job.parts}/{HEARTBEAT_FILE}", _options(job), JOB_HEARTBEAT_S)
    try:
        yield
    finally:
        beat.stop()
        _native.remove_prefix(job.parts, _options(job))


def publish_remote(job: Job, parts: list[Part]) -> EngineWrite:
    """Publishes each column's store from its parts in object storage: data
    files copied by the storage, indexes rewritten, every header last; all
    columns or none."""
    used = [p for p in parts if p.records]
    total = sum(p.records for p in parts)
    if not used:
        with tempfile.TemporaryDirectory(prefix="loaderx-empty-") as tmp:
            for k, plan in enumerate(job.plans):
                _empty_store(job, k, os.path.join(tmp, plan.column))
                upload(
                    os.path.join(tmp, plan.column),
                    f"{job.dest}/{plan.column}",
                    storage_options=cast("Any", job.storage_options),
                )
        return EngineWrite(job.dest, job.columns, 0, len(parts), 0)
    jobs = [
        (
            [f"{job.parts}/{p.name}/{plan.column}" for p in used],
            f"{job.dest}/{plan.column}",
            encode_attrs(job.attrs[plan.column]) or b"",
        )
        for plan in job.plans
    ]
    counts = _native.concat_urls(job.dest, jobs, _options(job))
    if any(n != total for n in counts):
        raise InternalError(f"the stores hold {counts} records for {total} rows")
    return EngineWrite(job.dest, job.columns, total, len(parts), len(used))


def refuse_existing(job: Job) -> None:
    """Refuses, before any task runs, a result with anything already at any
    column's ``root/<column>``."""
    taken = _native.occupied(job.dest, [f"{job.dest}/{c}" for c in job.columns], _options(job))
    if taken:
        raise StoreExistsError(
            f"{', '.join(taken)}: already there (objects under it); a write makes new stores, "
            "and nothing was written"
        )


def run_job(job: Job, run: Callable[[], Iterable[Part]]) -> EngineWrite:
    """Runs the engine's tasks (`run`, which returns the part each partition
    committed) and publishes their parts, locally or in object storage; a
    failure anywhere publishes nothing and leaves no parts behind. A result
    already there is refused before any task runs."""
    if job.remote:
        refuse_existing(job)
        with remote_build(job):
            return publish_remote(job, chosen_parts(run()))
    with local_build(job.dest) as (build, job.parts):
        return publish_local(job, build, chosen_parts(run()))
