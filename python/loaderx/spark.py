"""Writing stores from a Spark DataFrame: each task writes its partition's part
through ``mapInArrow`` (Arrow batches, never Python rows) and the driver
publishes one store per column, without reading a record.

Needs the ``spark`` extra (``pyspark``, which needs Java 17): run
``.venv/bin/pip install -e '.[spark]'`` in the loaderx checkout."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._engine._part import Part, write_part
from ._engine._plan import Job, destination, plan_job
from ._engine._publish import EngineWrite, run_job
from ._extras import require_extra

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["EngineWrite", "write"]

#: The schema of what each task returns to the driver: its committed part.
_RESULT_SCHEMA = "partition long, name string, records long"


def _task(job: Job) -> Any:
    """The function each Spark task runs on its partition's Arrow batches."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        # Unique among every attempt of every task of the application, retries
        # and speculative copies included; the uuid keeps apart two applications.
        attempt = f"t{ctx.taskAttemptId()}-{uuid.uuid4().hex[:8]}"
        part = write_part(batches, job, ctx.partitionId(), attempt)
        yield pa.RecordBatch.from_pydict(
            {"partition": [part.partition], "name": [part.name], "records": [part.records]}
        )

    return run


def write(
    df: DataFrame,
    root: str | os.PathLike[str],
    *,
    codec: str | Mapping[str, str],
    shapes: Mapping[str, Sequence[int]] | None = None,
    dict_bytes: Mapping[str, bytes] | None = None,
    attrs: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> EngineWrite:
    """Writes `df` as one store per column under `root`, which must not exist,
    with the records in ``df.collect()`` order, and returns what it published.

    Columns follow the converter's Arrow type rules: numbers and booleans become
    Dense stores of scalars; lists of numbers (nested to any depth), binary and
    strings (their UTF-8 bytes) Ragged ones; ``shapes={column: item_shape}``
    makes a list column Dense of that item shape, and a row of another shape is
    an error naming its partition and row. ``codec`` is a codec name or a dict of
    column to codec; ``zstd_dict`` takes its dictionary from ``dict_bytes``.
    ``attrs`` adds keys to every store's attributes.

    Each task writes its partition's part into a directory of its own attempt
    and renames it into place once complete; the driver concatenates, per column,
    the one part Spark reports for each partition (a retried or speculative
    attempt's other copy is never used) and publishes the root atomically. A
    failed job publishes nothing and removes its build directory.

    `root` may be a URL (``s3://``, ``gs://``, ``file://``...; `storage_options`
    as for ``Dense.open``; no ``root/<column>`` may hold any object yet, which
    is checked before any task runs): each task uploads its part under a
    hidden prefix beside the result, and the driver publishes each column at
    ``root/<column>`` by having the object storage copy the parts' data files
    (no data byte passes through the driver), every column's header last; a
    publish that fails removes every header and file it wrote, so no column is
    published unless all are. The parts' prefix is removed whatever happens."""
    require_extra("pyspark.sql", "loaderx.spark needs pyspark", "spark", " (pyspark needs Java 17)")
    from pyspark.sql.pandas.types import to_arrow_schema

    dest = destination(root, storage_options)
    schema = to_arrow_schema(df.schema)
    job = plan_job(
        schema, dest, "", engine="spark", codec=codec, shapes=shapes,
        dict_bytes=dict_bytes, attrs=attrs, storage_options=storage_options,
    )  # fmt: skip

    def run() -> list[Part]:
        rows = df.mapInArrow(_task(job), _RESULT_SCHEMA).collect()
        return [Part(int(r[0]), str(r[1]), int(r[2])) for r in rows]

    return run_job(job, run)
