"""loaderx.spark.write on a real local Spark session: results equal one writer's
stores, for every codec and partitioning; retries and failures."""

from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow as pa
import pytest
from engine_reference import DICT, SHAPES, assert_same_stores, bucket_keys, reference, table

from loaderx import errors
from loaderx.zrecord import Dense, clean

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession  # noqa: E402

import loaderx.spark  # noqa: E402

COLUMNS = ["id", "score", "flag", "emb", "tokens", "grid", "blob", "text"]


@pytest.fixture(scope="module")
def spark():
    # The workers must run this interpreter, with this checkout on their path.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2, 3]")  # 2 cores; a task may fail 3 times
        .appName("loaderx-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    yield session
    session.stop()


def frame(spark, t: pa.Table, partitions: int):
    """`t` as a DataFrame of `partitions` partitions, rows in order."""
    df = spark.createDataFrame(t.to_pandas())
    return df.repartitionByRange(partitions, "id") if partitions else df


def no_build_dirs(parent) -> None:
    assert [n for n in os.listdir(parent) if n.startswith(".")] == []


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_results_equal_one_writers_stores(spark, tmp_path, codec):
    t = table(61, seed=3)
    reference(t, str(tmp_path / "want"), codec)
    dicts = {c: DICT for c in COLUMNS} if codec == "zstd_dict" else None
    df = frame(spark, t, 5)
    assert [r[0] for r in df.select("id").collect()] == list(range(61))
    report = loaderx.spark.write(
        df, tmp_path / "got", codec=codec, shapes=SHAPES, dict_bytes=dicts, attrs={"run": 1}
    )
    assert (report.records, report.columns, report.parts) == (61, tuple(COLUMNS), 5)
    assert os.fspath(report) == str(tmp_path / "got")
    assert_same_stores(str(tmp_path / "got"), str(tmp_path / "want"), COLUMNS)
    with Dense.open(report.store("emb")) as s:
        assert s.attrs == {
            "converter": "loaderx.spark.write", "column": "emb",
            "arrow_type": "list<element: float>", "run": 1,
        }  # fmt: skip
    no_build_dirs(tmp_path)


def test_empty_partitions_and_an_empty_frame(spark, tmp_path):
    t = table(9, seed=4)
    reference(t, str(tmp_path / "want"), "zstd")
    # 9 rows over 6 partitions by a key that fills only some of them.
    df = spark.createDataFrame(t.to_pandas()).repartition(6, "flag").sortWithinPartitions("id")
    sizes = df.rdd.glom().map(len).collect()
    assert 0 in sizes and sum(sizes) == 9
    order = [r[0] for r in df.select("id").collect()]
    got = loaderx.spark.write(df, tmp_path / "got", codec="zstd", shapes=SHAPES)
    assert (got.records, got.parts, got.data_files) == (9, 6, sum(1 for s in sizes if s))
    want = reference_in_order(t, order, str(tmp_path / "ordered"))
    assert_same_stores(str(tmp_path / "got"), want, COLUMNS)
    empty = loaderx.spark.write(df.limit(0), tmp_path / "empty", codec="raw", shapes=SHAPES)
    assert empty.records == 0
    with Dense.open(empty.store("emb")) as s:
        assert (len(s), s.item_shape, str(s.dtype)) == (0, (4,), "float32")


def reference_in_order(t: pa.Table, order: list[int], root: str) -> str:
    reference(t.take(pa.array(order)), root, "zstd")
    return root


def test_a_thousand_tiny_partitions_publish_one_store(spark, tmp_path):
    n = 1000
    # One row per partition, with no shuffle to make them.
    df = spark.range(0, n, 1, n).selectExpr("id", "cast(id * 3 as smallint) as x")
    assert df.rdd.getNumPartitions() == n
    report = loaderx.spark.write(df, tmp_path / "got", codec="raw")
    assert (report.records, report.parts, report.data_files) == (n, n, n)
    with Dense.open(report.store("x")) as s:
        assert (s.format_version, s.data_shards) == (3, n)
        np.testing.assert_array_equal(np.from_dlpack(s[np.arange(n)]), np.arange(n) * 3)
        s.verify()
    no_build_dirs(tmp_path)


def test_a_task_that_fails_once_is_retried_with_the_exact_result(spark, tmp_path):
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    @udf("long")
    def fail_first_attempt(i):
        ctx = TaskContext.get()
        # Partition 2's first attempt fails after writing some of its rows.
        if ctx.partitionId() == 2 and ctx.attemptNumber() == 0 and i % 10 == 5:
            raise RuntimeError("injected failure")
        return i

    t = table(40, seed=5)
    reference(t, str(tmp_path / "want"), "zstd")
    df = frame(spark, t, 4).withColumn("id", fail_first_attempt(col("id")))
    report = loaderx.spark.write(df, tmp_path / "got", codec="zstd", shapes=SHAPES)
    assert (report.records, report.parts) == (40, 4)
    assert_same_stores(str(tmp_path / "got"), str(tmp_path / "want"), COLUMNS)
    no_build_dirs(tmp_path)


def test_a_failing_job_publishes_nothing(spark, tmp_path):
    from pyspark.sql.functions import col, udf

    @udf("long")
    def always_fail(i):
        if i == 17:
            raise RuntimeError("injected failure")
        return i

    df = frame(spark, table(30), 3).withColumn("id", always_fail(col("id")))
    with pytest.raises(Exception, match="injected failure"):
        loaderx.spark.write(df, tmp_path / "got", codec="raw", shapes=SHAPES)
    assert os.listdir(tmp_path) == []
    assert clean(tmp_path) == []


def test_a_row_of_another_shape_is_an_error_naming_it(spark, tmp_path):
    t = table(12)
    emb = t.column("emb").to_pylist()
    emb[8] = [1.0, 2.0]
    t = t.set_column(t.schema.get_field_index("emb"), "emb", pa.array(emb, pa.list_(pa.float32())))
    with pytest.raises(
        Exception, match=r"column 'emb': row \d+ has shape \(2,\), but shapes= gives \(4,\)"
    ):
        loaderx.spark.write(frame(spark, t, 2), tmp_path / "got", codec="raw", shapes=SHAPES)
    assert os.listdir(tmp_path) == []


def test_options_are_checked_before_any_task_runs(spark, tmp_path):
    df = frame(spark, table(4), 1)
    with pytest.raises(errors.InvalidArgumentError) as e:
        loaderx.spark.write(
            df, tmp_path / "got", codec={"id": "zstd_dict", "tokens": "raw"},
            shapes={"score": (2,), "nope": (1,), "tokens": (2, 2)},
        )  # fmt: skip
    msg = str(e.value)
    for part in (
        "codec= names no codec for column 'flag'",
        "zstd_dict needs its dictionary",
        "shapes= names 'nope'",
        "2 dimension(s) for column 'tokens'",
        "'score'",
    ):
        assert part in msg, (part, msg)
    (tmp_path / "taken").mkdir()
    with pytest.raises(errors.StoreExistsError):
        loaderx.spark.write(df, tmp_path / "taken", codec="raw", shapes=SHAPES)
    assert os.listdir(tmp_path) == ["taken"]


def test_writing_into_s3_reads_back_exact_values(spark, tmp_path, moto_s3, s3_bucket):
    t = table(37, seed=9)
    reference(t, str(tmp_path / "want"), "zstd")
    opts = moto_s3.storage_options()
    url = f"s3://{s3_bucket}/corpus"
    report = loaderx.spark.write(
        frame(spark, t, 4), url, codec="zstd", shapes=SHAPES, storage_options=opts
    )
    assert (report.path, report.records, report.parts, report.data_files) == (url, 37, 4, 4)
    assert_same_stores(url, str(tmp_path / "want"), COLUMNS, storage_options=opts)
    with Dense.open(f"{url}/emb", storage_options=opts) as s:
        assert s.attrs is not None and s.attrs["converter"] == "loaderx.spark.write"
    # Only the stores remain: the parts were removed.
    keys = bucket_keys(moto_s3, s3_bucket)
    assert {k.split("/")[1] for k in keys} == set(COLUMNS)
    assert len(keys) == len(COLUMNS) * 8  # header, index, index.sum, attrs, 4 data files
    # Writing there again is refused before any task runs: no task marks it ran.
    from pyspark.sql.functions import col, udf

    ran = tmp_path / "ran"

    @udf("long")
    def mark(i):
        ran.touch()
        return i

    again = frame(spark, t, 2).withColumn("id", mark(col("id")))
    with pytest.raises(errors.StoreExistsError, match=r"/corpus/id, .*/corpus/text: already there"):
        loaderx.spark.write(again, url, codec="zstd", shapes=SHAPES, storage_options=opts)
    assert bucket_keys(moto_s3, s3_bucket) == keys
    assert os.listdir(tmp_path) == ["want"]
