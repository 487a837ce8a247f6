"""Conversion on an engine: one token corpus in Parquet, written by
``loaderx.spark.write`` and by MosaicML Streaming's ``dataframe_to_mds`` from the
same Spark DataFrame, and by LitData's ``optimize`` from the same Parquet row
groups, with 1 and 2 cores (Spark ``local[N]``; LitData ``num_workers=N``); then
the read-back gather rate of each output.

The corpus: ``--rows`` records (default 50,000; ``--quick``: 10,000) of
``tokens`` (int32 lists of 16 to 255 tokens, Zipf-distributed values) and
``label`` (int64), written once to a Parquet file of 16 row groups. Spark reads it
into a DataFrame range-partitioned by row into 16 partitions in the file's order,
cached and counted before the clock starts, and Spark's Python workers are
started by a job that reads every partition's Arrow batches (on a cluster the
executors are up before a conversion starts; otherwise the first Spark writer
timed would pay their start for both), so the Spark writers' times are the
writing alone; LitData's inputs are the row-group numbers, each read from the
Parquet file by its worker (inside its time). Every writer uses zstd, and
loaderx also writes with ``zstd_dict`` for the tokens: a dictionary trained with
``loaderx.utils.train_dict`` on a sample of the DataFrame's rows brought to the
driver, inside that write's time. Output
bytes are every file the writer left, measured right after it returned. After
every write, each output is read back whole and compared with the corpus (in
order for the Spark writers; as a multiset for LitData, whose output interleaves
its workers' records), so every reader is warm when its gather is timed: ``--reads``
random positions (default 20,000) in batches of 256, read with loaderx's
``Ragged.gather`` (and ``Dense`` for labels), Streaming's ``StreamingDataset``
(local only, which decompresses each shard on first use) and
LitData's ``StreamingDataset`` item by item (their access path for random
positions), as rows per second. Everything is under ``--dir`` (default: a new
folder under /tmp), removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time
from loaderx_bench.report import table
from loaderx_bench.units import MIB

ROW_GROUPS = 16
BATCH = 256


def corpus(rows: int, path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    lens = rng.integers(16, 256, rows)
    values = np.minimum(rng.zipf(1.3, int(lens.sum())), 50_000).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    labels = rng.integers(0, 1000, rows).astype(np.int64)
    table = pa.table(
        {
            "tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
            "label": pa.array(labels),
        }
    )
    pq.write_table(table, path, row_group_size=-(-rows // ROW_GROUPS), compression="none")
    return [values[offsets[i] : offsets[i + 1]] for i in range(rows)], labels


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def spark_session(cores: int):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(f"bench-engine-{cores}")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )


def frame(spark, parquet: Path):
    """The corpus as a cached DataFrame of ROW_GROUPS non-empty partitions in the
    file's order, read and shuffled before any writer's clock starts."""
    from pyspark.sql.functions import monotonically_increasing_id

    df = (
        spark.read.parquet(str(parquet))
        .withColumn("_row", monotonically_increasing_id())
        .repartitionByRange(ROW_GROUPS, "_row")
        .sortWithinPartitions("_row")
        .drop("_row")
        .cache()
    )
    assert df.count() > 0
    warm_workers(df)
    return df


def warm_workers(df) -> None:
    """Starts Spark's Python workers with one job that reads every partition's
    Arrow batches and writes nothing: on a cluster the executors are up before a
    conversion starts, and without this the first Spark writer timed would pay
    the workers' start for both."""
    import pyarrow as pa

    def rows(batches):
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})

    assert sum(r[0] for r in df.mapInArrow(rows, "n long").collect()) == df.count()


def write_loaderx(df, out: Path) -> None:
    import loaderx.spark

    loaderx.spark.write(df, out, codec="zstd")


#: The zstd_dict row's dictionary: its size, and the share of the rows sampled
#: (on the driver) to train it, about 100 times its size in tokens.
DICT_BYTES = 16 << 10
DICT_SAMPLE = 0.06


def write_loaderx_dict(df, out: Path) -> None:
    """``zstd_dict`` for the token lists (trained here, inside the write's time,
    from a sample of the DataFrame's rows brought to the driver); ``zstd`` for
    the labels, 8 bytes each, which a dictionary does not help."""
    import loaderx.spark
    from loaderx.utils import train_dict

    sample = df.select("tokens").sample(fraction=DICT_SAMPLE, seed=0).toArrow().column(0)
    records = [np.asarray(r, np.int32) for r in sample.to_numpy(zero_copy_only=False)]
    dictionary = train_dict(records, size=DICT_BYTES)
    loaderx.spark.write(
        df, out, codec={"tokens": "zstd_dict", "label": "zstd"},
        dict_bytes={"tokens": dictionary},
    )  # fmt: skip


def write_mds(df, out: Path) -> None:
    from streaming.base.converters import dataframe_to_mds

    dataframe_to_mds(
        df,
        merge_index=True,
        mds_kwargs={
            "out": str(out),
            "columns": {"tokens": "ndarray:int32", "label": "int64"},
            "compression": "zstd",
        },
    )


def litdata_item(group: int, parquet: str):
    import pyarrow.parquet as pq

    t = pq.ParquetFile(parquet).read_row_group(group)
    tokens = t.column("tokens").to_pylist()
    labels = t.column("label").to_pylist()
    for tok, lab in zip(tokens, labels, strict=True):
        yield {"tokens": np.asarray(tok, np.int32), "label": int(lab)}


def write_litdata(workers: int, parquet: Path, out: Path) -> None:
    import functools

    import litdata

    litdata.optimize(
        fn=functools.partial(litdata_item, parquet=str(parquet)),
        inputs=list(range(ROW_GROUPS)),
        output_dir=str(out),
        num_workers=workers,
        chunk_bytes="64MB",
        compression="zstd",
        mode="overwrite",
    )


def reader(kind: str, out: Path):
    """(len, read(positions) -> list of (tokens, label)) of one output."""
    if kind.startswith("loaderx"):
        from loaderx.zrecord import Dense, Ragged

        toks, labs = Ragged.open(out / "tokens"), Dense.open(out / "label")

        def read_loaderx(pos: np.ndarray):
            t = [np.from_dlpack(x) for x in toks.gather(pos).to_tensors()]
            return list(zip(t, np.from_dlpack(labs[pos]).tolist(), strict=True))

        return len(toks), read_loaderx
    if kind == "mds":
        from streaming import StreamingDataset

        # A local StreamingDataset: LocalDataset reads only uncompressed shards.
        ds = StreamingDataset(local=str(out), shuffle=False)
        return len(ds), lambda pos: [(ds[int(i)]["tokens"], ds[int(i)]["label"]) for i in pos]
    import litdata

    lds = litdata.StreamingDataset(input_dir=str(out))

    def read_lit(pos: np.ndarray):
        items = [lds[int(i)] for i in pos]
        return [(it["tokens"], it["label"]) for it in items]

    return len(lds), read_lit


def check(kind: str, out: Path, tokens: list[np.ndarray], labels: np.ndarray) -> None:
    """The output holds the corpus: in order for the Spark writers; as a multiset
    for LitData, whose workers' records interleave in its output."""
    n, read = reader(kind, out)
    assert n == len(tokens), (kind, n, len(tokens))
    everything = np.arange(n)
    got = [
        (np.asarray(t), int(lab))
        for lo in range(0, n, 4096)
        for t, lab in read(everything[lo : lo + 4096])
    ]
    want = list(zip(tokens, labels.tolist(), strict=True))
    if kind == "litdata":

        def key(r: tuple[np.ndarray, int]) -> tuple[int, bytes]:
            return r[1], r[0].tobytes()

        got, want = sorted(got, key=key), sorted(want, key=key)
    for k, ((t, lab), (wt, wl)) in enumerate(zip(got, want, strict=True)):
        assert np.array_equal(t, wt) and lab == wl, (kind, k)


def gather_rate(kind: str, out: Path, reads: int) -> float:
    n, read = reader(kind, out)
    pos = np.random.default_rng(1).integers(0, n, reads)
    t0 = time.perf_counter()
    for lo in range(0, reads, BATCH):
        read(pos[lo : lo + BATCH])
    return reads / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int)
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args(argv)
    rows = args.rows or (10_000 if args.quick else 50_000)
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-engine-"))
    root.mkdir(parents=True, exist_ok=True)
    with one_bench_at_a_time():
        start_load = load_average()
        parquet = root / "corpus.parquet"
        tokens, labels = corpus(rows, parquet)
        raw = sum(t.nbytes for t in tokens) + labels.nbytes
        results = []
        for cores in (1, 2):
            spark = spark_session(cores)
            try:
                df = frame(spark, parquet)
                writers = (
                    ("loaderx", write_loaderx), ("loaderx-dict", write_loaderx_dict),
                    ("mds", write_mds),
                )  # fmt: skip
                for kind, write in writers:
                    out = root / f"{kind}-{cores}"
                    t0 = time.perf_counter()
                    write(df, out)
                    results.append((kind, cores, time.perf_counter() - t0, out, disk_bytes(out)))
            finally:
                spark.stop()
            out = root / f"litdata-{cores}"
            t0 = time.perf_counter()
            write_litdata(cores, parquet, out)
            results.append(("litdata", cores, time.perf_counter() - t0, out, disk_bytes(out)))
        names = {"loaderx": "loaderx.spark.write", "loaderx-dict": "loaderx.spark.write zstd_dict",
                 "mds": "Streaming dataframe_to_mds", "litdata": "LitData optimize"}  # fmt: skip
        lines = []
        for kind, cores, seconds, out, size in results:
            check(kind, out, tokens, labels)
            rate = gather_rate(kind, out, args.reads) if cores == 2 else None
            lines.append(
                [
                    names[kind], cores, f"{seconds:.2f}", f"{rows / seconds / 1000:.1f}",
                    f"{size / MIB:.1f}",
                    "-" if rate is None else f"{rate / 1000:.1f}",
                ]
            )  # fmt: skip
        end_load = load_average()
        print(f"machine: {machine()}")
        print(f"checkout: {checkout()}; load average {start_load} at start, {end_load} at end")
        print(
            f"corpus: {rows:,} records, {raw / MIB:.1f} MiB raw (int32 tokens + int64 labels), "
            f"Parquet of {ROW_GROUPS} row groups; codec zstd everywhere but the zstd_dict row "
            f"(a {DICT_BYTES >> 10} KiB dictionary for the tokens, trained on "
            f"{DICT_SAMPLE:.0%} of the rows inside its write time); gather: {args.reads:,} "
            f"random positions in batches of {BATCH}, output of the 2-core write"
        )
        print(
            table(
                ["writer", "cores", "write s", "k rows/s", "output MiB", "gather k rows/s"],
                lines,
            )
        )
    if args.dir is None:
        shutil.rmtree(root)
    return 0
