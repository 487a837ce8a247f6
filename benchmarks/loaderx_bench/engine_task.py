"""Where a 1-core Spark task of ``loaderx.spark.write`` spends its time, on the
corpus of ``loaderx_bench.engine_write``: the tasks' work outside Spark, by
phase (Arrow to NumPy, creating the writers, appending, which encodes, and
closing), writing the 16 partitions' parts inside a real build directory's
``.parts`` as the tasks do; then, in a warm ``local[1]`` session, the whole
write, the driver's publish within it, and a ``mapInArrow`` job that only counts
each partition's rows (Spark's own cost of running the tasks). Prints seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.engine_write import ROW_GROUPS, corpus, frame, spark_session, write_loaderx
from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time


def task_phases(parquet: Path, root: Path) -> dict[str, float]:
    import pyarrow.parquet as pq

    from loaderx import _native
    from loaderx._engine._part import _create  # pyright: ignore[reportPrivateUsage]
    from loaderx._engine._plan import plan_job
    from loaderx.converter._records import records_of

    table = pq.read_table(parquet)
    job = plan_job(
        table.schema, str(root / "out"), "", engine="spark", codec="zstd", shapes=None,
        dict_bytes=None, attrs=None, storage_options=None,
    )  # fmt: skip
    build = _native.BuildDir(str(root / "out"))
    parts = Path(os.fspath(build.path)) / _native.PARTS_DIR
    parts.mkdir()
    spent = dict.fromkeys(("arrow to numpy", "create", "append (encode)", "close"), 0.0)
    bounds = np.linspace(0, len(table), ROW_GROUPS + 1).astype(int)
    try:
        for k in range(ROW_GROUPS):
            piece = table.slice(bounds[k], bounds[k + 1] - bounds[k]).combine_chunks()
            batch = piece.to_batches()[0]
            where = parts / f"p{k:06d}"
            where.mkdir()
            for c, plan in enumerate(job.plans):
                t0 = time.perf_counter()
                records = [r for _, r in records_of(batch.column(c), plan, 0)]
                t1 = time.perf_counter()
                w = _create(plan, str(where / plan.column))
                t2 = time.perf_counter()
                for r in records:
                    w.append(r)  # pyright: ignore[reportArgumentType]
                t3 = time.perf_counter()
                w.close()
                t4 = time.perf_counter()
                for name, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    spent[name] += dt
    finally:
        build.discard()
    return spent


def count_rows(batches):
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-engine-task-"))
    import loaderx._engine._publish as publish

    with one_bench_at_a_time():
        start_load = load_average()
        parquet = root / "corpus.parquet"
        corpus(args.rows, parquet)
        phases = task_phases(parquet, root)
        print(f"machine: {machine()}")
        print(f"checkout: {checkout()}; load average {start_load} at start")
        print(
            f"tasks' work outside Spark, {ROW_GROUPS} parts of {args.rows:,} rows, seconds: "
            + ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
        )
        spent: dict[str, float] = {}
        original = publish.publish_local

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                spent["publish"] = time.perf_counter() - t0

        publish.publish_local = timed
        spark = spark_session(1)
        try:
            df = frame(spark, parquet)
            for rep in range(2):
                t0 = time.perf_counter()
                write_loaderx(df, root / f"write-{rep}")
                total = time.perf_counter() - t0
                publish_s = spent["publish"]
                print(
                    f"local[1] write {total:.3f} s, of which the driver's publish {publish_s:.3f} s"
                )
            for _ in range(2):
                t0 = time.perf_counter()
                df.mapInArrow(count_rows, "n long").collect()
                print(f"local[1] mapInArrow counting rows {time.perf_counter() - t0:.3f} s")
        finally:
            publish.publish_local = original
            spark.stop()
        print(f"load average {load_average()} at end")
    shutil.rmtree(root)
    return 0
