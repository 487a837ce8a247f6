"""A task's side of an engine write: its partition's Arrow batches become one
part store per column, in an attempt-unique directory that appears under its
final name only once every column is complete (a rename), so that a failed or
duplicate attempt never leaves a partial part where the driver looks."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..converter._plan import BadRecord, Plan
from ..converter._records import records_of
from ..errors import InternalError, InvalidArgumentError
from ..zrecord import Dense, DenseWriter, Ragged, RaggedBatch, RaggedWriter
from ._plan import Job

if TYPE_CHECKING:
    import numpy.typing as npt
    import pyarrow as pa

    from ..converter._arrow import Array


@dataclass(frozen=True)
class Part:
    """What one committed attempt wrote: the driver publishes exactly one per
    partition, the one the engine reports as the partition's result."""

    partition: int
    #: The committed attempt's directory name under the job's parts location.
    name: str
    records: int


def part_name(partition: int, attempt: str) -> str:
    return f"p{partition:06d}-{attempt}"


def _create(plan: Plan, path: str) -> DenseWriter | RaggedWriter:
    assert plan.dtype is not None
    if plan.kind == "dense":
        assert plan.shape is not None
        return Dense.create(
            path, plan.dtype, plan.shape, codec=plan.codec, data_shards=1,
            dict_bytes=plan.dictionary,
        )  # fmt: skip
    return Ragged.create(
        path, plan.dtype, ndim=plan.ndim, codec=plan.codec, data_shards=1,
        dict_bytes=plan.dictionary,
    )  # fmt: skip


def write_columns(batches: Iterable[pa.RecordBatch], job: Job, where: str, partition: int) -> int:
    """Writes the batches' columns as one store each under `where`; returns the
    rows written. Writes nothing for a partition without rows."""
    writers: dict[str, DenseWriter | RaggedWriter] = {}
    rows = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            names = batch.schema.names
            if names != list(job.columns):
                raise InvalidArgumentError(
                    f"partition {partition}: the batch has columns {names}, the plan "
                    f"{list(job.columns)}"
                )
            for k, plan in enumerate(job.plans):
                arr = cast("Array", batch.column(k))
                for _, records in records_of(arr, plan, rows):
                    w = writers.get(plan.column)
                    if w is None:
                        w = writers[plan.column] = _create(plan, os.path.join(where, plan.column))
                    if isinstance(w, DenseWriter):
                        w.append(cast("npt.NDArray[np.generic]", records))
                    else:
                        w.append(cast(RaggedBatch, records))
            rows += batch.num_rows
        for w in writers.values():
            w.close()
    except BadRecord as e:
        raise BadRecord(f"partition {partition}: {e} (row counted within the partition)") from e
    finally:
        for w in writers.values():
            if not w.closed:
                w.abort()
    if rows and len(writers) != len(job.plans):
        raise InternalError(f"partition {partition}: {len(writers)} stores for {rows} rows")
    return rows


def write_local_part(
    batches: Iterable[pa.RecordBatch], job: Job, partition: int, attempt: str
) -> Part:
    """Writes the partition into `job.parts`/.NAME.tmp, then renames it to NAME:
    the commit. The parts directory must exist (the driver's build directory
    holds it), so a task that outlives a failed job cannot recreate it."""
    name = part_name(partition, attempt)
    final = os.path.join(job.parts, name)
    tmp = os.path.join(job.parts, f".{name}.tmp")
    os.mkdir(tmp)
    try:
        rows = write_columns(batches, job, tmp, partition)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Part(partition, name, rows)


def write_remote_part(
    batches: Iterable[pa.RecordBatch], job: Job, partition: int, attempt: str
) -> Part:
    """Writes the partition's stores in a local temporary directory and uploads
    each under `job.parts`/NAME/; the driver only ever reads the attempt the
    engine reports, so a duplicate or failed attempt's objects are never used
    (the driver removes them all with the parts prefix)."""
    import tempfile

    from ..zrecord import upload

    name = part_name(partition, attempt)
    with tempfile.TemporaryDirectory(prefix="loaderx-part-") as tmp:
        rows = write_columns(batches, job, tmp, partition)
        if rows:
            for plan in job.plans:
                upload(
                    os.path.join(tmp, plan.column),
                    f"{job.parts}/{name}/{plan.column}",
                    storage_options=cast("Any", job.storage_options),
                )
    return Part(partition, name, rows)


def write_part(batches: Iterable[pa.RecordBatch], job: Job, partition: int, attempt: str) -> Part:
    """A task's whole work: its partition's part, where the job's result goes."""
    if job.remote:
        return write_remote_part(batches, job, partition, attempt)
    return write_local_part(batches, job, partition, attempt)
