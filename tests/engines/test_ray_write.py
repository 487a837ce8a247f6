"""loaderx.ray.write on a real local Ray runtime: results equal one writer's
stores, in the dataset's order; a task that dies once; a failing write."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from engine_reference import DICT, SHAPES, assert_same_stores, bucket_keys, reference, table

from loaderx import errors
from loaderx.zrecord import Dense, clean

pytest.importorskip("ray.data")
import ray  # noqa: E402
import ray.data  # noqa: E402

import loaderx.ray  # noqa: E402

COLUMNS = ["id", "score", "flag", "emb", "tokens", "grid", "blob", "text"]


@pytest.fixture(scope="module", autouse=True)
def runtime():
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}},
    )  # fmt: skip
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def dataset(t: pa.Table, blocks: int):
    """`t` as a dataset of `blocks` blocks, some empty when blocks > rows."""
    bounds = np.linspace(0, len(t), blocks + 1).astype(int)
    return ray.data.from_arrow(
        [t.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    )


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_results_equal_one_writers_stores(tmp_path, codec):
    t = table(45, seed=7)
    reference(t, str(tmp_path / "want"), codec)
    dicts = {c: DICT for c in COLUMNS} if codec == "zstd_dict" else None
    report = loaderx.ray.write(
        dataset(t, 4), tmp_path / "got", codec=codec, shapes=SHAPES, dict_bytes=dicts
    )
    assert (report.records, report.columns) == (45, tuple(COLUMNS))
    assert report.parts >= 1
    assert_same_stores(str(tmp_path / "got"), str(tmp_path / "want"), COLUMNS)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


def test_many_blocks_some_empty_keep_the_datasets_order(tmp_path):
    t = table(30, seed=8)
    reference(t, str(tmp_path / "want"), "zstd")
    ds = dataset(t, 40).map_batches(lambda b: b, batch_format="pyarrow", batch_size=None)
    report = loaderx.ray.write(ds, tmp_path / "got", codec="zstd", shapes=SHAPES)
    assert report.records == 30
    assert_same_stores(str(tmp_path / "got"), str(tmp_path / "want"), COLUMNS)


def test_a_task_that_dies_once_is_retried_with_the_exact_result(tmp_path):
    marker = tmp_path / "died"
    t = pa.table({"id": np.arange(200, dtype=np.int64), "x": np.arange(200, dtype=np.float64)})

    def die_once(batch: pa.Table) -> pa.Table:
        # The worker process exits part way through its block, once: a system
        # failure, which Ray retries.
        if 100 in batch.column("id").to_pylist() and not marker.exists():
            marker.write_text("x")
            os._exit(1)
        return batch

    ds = dataset(t, 4).map_batches(die_once, batch_format="pyarrow", batch_size=None)
    report = loaderx.ray.write(ds, tmp_path / "got", codec="raw")
    assert marker.exists()
    assert report.records == 200
    with Dense.open(report.store("x")) as s:
        np.testing.assert_array_equal(np.from_dlpack(s[np.arange(200)]), np.arange(200.0))
    assert sorted(os.listdir(tmp_path)) == ["died", "got"]


def test_a_failing_write_publishes_nothing(tmp_path):
    t = pa.table({"id": np.arange(50, dtype=np.int64)})

    def fail(batch: pa.Table) -> pa.Table:
        if 33 in batch.column("id").to_pylist():
            raise RuntimeError("injected failure")
        return batch

    ds = dataset(t, 3).map_batches(fail, batch_format="pyarrow", batch_size=None)
    with pytest.raises(Exception, match="injected failure"):
        loaderx.ray.write(ds, tmp_path / "got", codec="raw")
    assert os.listdir(tmp_path) == []
    assert clean(tmp_path) == []


def test_writing_into_s3_reads_back_exact_values(tmp_path, moto_s3, s3_bucket):
    t = table(33, seed=11)
    reference(t, str(tmp_path / "want"), "raw")
    opts = moto_s3.storage_options()
    url = f"s3://{s3_bucket}/data/corpus"
    report = loaderx.ray.write(dataset(t, 3), url, codec="raw", shapes=SHAPES, storage_options=opts)
    assert (report.path, report.records) == (url, 33)
    assert_same_stores(url, str(tmp_path / "want"), COLUMNS, storage_options=opts)
    keys = bucket_keys(moto_s3, s3_bucket)
    assert {k.split("/")[2] for k in keys} == set(COLUMNS)
    assert not any("/.parts" in k for k in keys)


def test_writing_to_a_file_url(tmp_path):
    t = table(20, seed=12)
    reference(t, str(tmp_path / "want"), "zstd")
    report = loaderx.ray.write(dataset(t, 2), f"file://{tmp_path}/got", codec="zstd", shapes=SHAPES)
    assert report.records == 20
    assert_same_stores(str(tmp_path / "got"), str(tmp_path / "want"), COLUMNS)
    assert sorted(os.listdir(tmp_path)) == ["got", "want"]
    before = files_under(tmp_path / "got")
    # A second write there is refused (the Spark tests show no task runs), and
    # the stores are left as they were.
    with pytest.raises(errors.StoreExistsError, match=r"got/id, .*got/text: already there"):
        loaderx.ray.write(dataset(t, 2), f"file://{tmp_path}/got", codec="zstd", shapes=SHAPES)
    assert sorted(os.listdir(tmp_path)) == ["got", "want"]
    assert files_under(tmp_path / "got") == before


def files_under(root) -> list[str]:
    """Every file and directory under `root`, relative, directories with a '/'."""
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        out += [os.path.normpath(os.path.join(rel, n)) + "/" for n in dirs]
        out += [os.path.normpath(os.path.join(rel, n)) for n in files]
    return sorted(out)


def test_a_publish_failing_at_the_last_header_leaves_no_column(tmp_path):
    t = table(20, seed=13)
    root = tmp_path / "got"
    # The last column's header cannot be written (a directory holds its name),
    # so every other column's header is written before the failure.
    (root / "text" / "header.bin").mkdir(parents=True)
    with pytest.raises(errors.StorageError, match=r"text/header\.bin: uploading failed"):
        loaderx.ray.write(dataset(t, 2), f"file://{root}", codec="zstd", shapes=SHAPES)
    # No column store and no file of one: only the directory put in the way.
    assert files_under(root) == ["text/", "text/header.bin/"]
    (root / "text" / "header.bin").rmdir()
    report = loaderx.ray.write(dataset(t, 2), f"file://{root}", codec="zstd", shapes=SHAPES)
    assert report.records == 20
