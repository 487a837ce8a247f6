"""Writing stores from a Ray dataset: each write task of a ``Datasink`` writes
its blocks' part from their Arrow tables, and the driver publishes one store per
column without reading a record.

Needs the ``ray`` extra: run ``.venv/bin/pip install -e '.[ray]'`` in the
loaderx checkout."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._engine._part import Part, write_part
from ._engine._plan import Job, destination, plan_job
from ._engine._publish import EngineWrite, run_job
from ._extras import require_extra
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

__all__ = ["EngineWrite", "write"]


def _arrow_batches(blocks: Iterable[Any]) -> Iterator[pa.RecordBatch]:
    from ray.data.block import BlockAccessor

    for block in blocks:
        yield from BlockAccessor.for_block(block).to_arrow().to_batches()


def _sink(job: Job) -> Any:
    """The Datasink whose write tasks write the parts; its results are the
    committed part of each write task, in the dataset's order."""
    from ray.data import Datasink

    class _Sink(Datasink[Part]):
        def __init__(self) -> None:
            self.parts: list[Part] = []

        def write(self, blocks: Iterable[Any], ctx: Any) -> Part:
            # A retried task runs again with its index; the uuid keeps its
            # attempts apart, and only the returning one is reported.
            attempt = f"a{uuid.uuid4().hex[:12]}"
            return write_part(_arrow_batches(blocks), job, int(ctx.task_idx), attempt)

        def on_write_complete(self, write_result: Any) -> None:
            self.parts = list(write_result.write_returns)

        def get_name(self) -> str:
            return "loaderx"

    return _Sink()


def write(
    dataset: Dataset,
    root: str | os.PathLike[str],
    *,
    codec: str | Mapping[str, str],
    shapes: Mapping[str, Sequence[int]] | None = None,
    dict_bytes: Mapping[str, bytes] | None = None,
    attrs: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> EngineWrite:
    """Writes `dataset` as one store per column under `root`, which must not
    exist, with the records in the dataset's order, and returns what it
    published. Columns, options and failure handling are those of
    ``loaderx.spark.write``: each write task writes its part into a directory of
    its own attempt, renamed into place once complete; the driver publishes, per
    column, the one part Ray reports for each task, and a failed write
    publishes nothing. `root` may be a URL, as for ``loaderx.spark.write``."""
    require_extra("ray.data", "loaderx.ray needs ray", "ray")
    dest = destination(root, storage_options)
    schema = dataset.schema(fetch_if_missing=True)
    base = getattr(schema, "base_schema", None)
    import pyarrow as pa

    if not isinstance(base, pa.Schema):
        raise InvalidArgumentError(
            f"ray.write needs a dataset of Arrow blocks; its schema is {schema!r}"
        )
    job = plan_job(
        base, dest, "", engine="ray", codec=codec, shapes=shapes,
        dict_bytes=dict_bytes, attrs=attrs, storage_options=storage_options,
    )  # fmt: skip
    options = dataset.context.execution_options
    ordered = options.preserve_order
    # Write task indices follow the dataset's order only when blocks reach the
    # write in order.
    options.preserve_order = True

    def run() -> list[Part]:
        sink = _sink(job)
        dataset.write_datasink(sink)  # pyright: ignore[reportUnknownMemberType]
        return sink.parts

    try:
        return run_job(job, run)
    finally:
        options.preserve_order = ordered
