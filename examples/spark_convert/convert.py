"""Convert a text corpus on Spark with ``loaderx.spark.write``, and check that the
result holds exactly what one writer converting the whole corpus writes.

The corpus is the sentences of the Python standard library's docstrings, found
and split by ``examples/word2vec/prepare.py`` (both examples read the same text;
every Python ships it, so nothing is downloaded). The DataFrame starts as one row
per file, range-partitioned by file number into ``--partitions`` partitions; a
``mapInArrow`` step reads each partition's files and emits one row per sentence,
so the tokenizing runs in the Spark tasks. ``loaderx.spark.write`` then writes it,
each task its partition's part, and the driver publishes one store per column:

  OUT/corpus/text   Ragged uint8, ndim 1   the sentence's lowercased words joined
                                           by single spaces (a string column: its
                                           UTF-8 bytes)
  OUT/corpus/file   Dense int32 ()         the number of the file it came from
  OUT/corpus/words  Dense int32 ()         its word count

One writer over the same sentences, in this process, writes the reference
``OUT/single``; both are verified and compared record for record. Counts and
timings go to ``OUT/result.json``. Needs pyspark (the ``spark`` extra) and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

PREPARE = Path(__file__).resolve().parent.parent / "word2vec" / "prepare.py"
sys.path.insert(0, str(PREPARE.parent))
from prepare import docstrings, sentences, stdlib_files  # noqa: E402

# reduced: what CI runs, the first files of the stdlib in path order.
SIZES = {"reduced": {"files": 40, "cores": 2}, "full": {"files": None, "cores": None}}


def file_sentences(path: str) -> Iterator[list[str]]:
    for doc in docstrings(Path(path)):
        yield from sentences(doc)


def tokenize(batches):
    """The Spark step: each (file, path) row becomes a row per sentence."""
    import pyarrow as pa

    for batch in batches:
        files, words, texts = [], [], []
        for number, path in zip(
            batch.column("file").to_pylist(), batch.column("path").to_pylist(), strict=True
        ):
            for s in file_sentences(path):
                files.append(number)
                words.append(len(s))
                texts.append(" ".join(s))
        yield pa.RecordBatch.from_pydict(
            {
                "text": pa.array(texts, pa.string()),
                "file": pa.array(files, pa.int32()),
                "words": pa.array(words, pa.int32()),
            }
        )


def single_writer(files: list[Path], dest: Path, codec: str) -> int:
    from loaderx.zrecord import Dense, Ragged, RaggedBatch

    texts, numbers, words = [], [], []
    for number, f in enumerate(files):
        for s in file_sentences(str(f)):
            texts.append(np.frombuffer(" ".join(s).encode(), np.uint8))
            numbers.append(number)
            words.append(len(s))
    dest.mkdir(parents=True)
    with Ragged.create(dest / "text", np.uint8, ndim=1, codec=codec) as w:
        w.append(RaggedBatch.from_records(texts))
    for name, values in (("file", numbers), ("words", words)):
        with Dense.create(dest / name, np.int32, (), codec=codec) as w:
            w.append(np.array(values, np.int32))
    return len(texts)


def same_records(a: Path, b: Path) -> None:
    from loaderx.zrecord import Dense, Ragged

    with Ragged.open(a / "text") as x, Ragged.open(b / "text") as y:
        x.verify()
        y.verify()
        assert len(x) == len(y), (len(x), len(y))
        for tx, ty in zip(x[:].to_tensors(), y[:].to_tensors(), strict=True):
            assert np.array_equal(np.from_dlpack(tx), np.from_dlpack(ty))
    for name in ("file", "words"):
        with Dense.open(a / name) as x, Dense.open(b / name) as y:
            x.verify()
            assert np.array_equal(np.from_dlpack(x[:]), np.from_dlpack(y[:])), name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=SIZES, default="reduced")
    ap.add_argument("--cores", type=int, help="Spark's local cores (reduced: 2; full: all)")
    ap.add_argument("--partitions", type=int, help="default: 4 per core")
    ap.add_argument("--codec", default="zstd", choices=["raw", "zstd"])
    ap.add_argument("--out", type=Path, help="default data/spark_convert/SIZE")
    args = ap.parse_args(argv)
    preset = SIZES[args.size]
    cores = args.cores or preset["cores"] or os.cpu_count() or 1
    partitions = args.partitions or 4 * cores
    out = args.out or Path("data/spark_convert") / args.size
    if out.exists():
        shutil.rmtree(out)  # the example's own output from an earlier run
    out.mkdir(parents=True)

    from pyspark.sql import SparkSession

    import loaderx.spark

    # The workers run this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("loaderx-spark-convert")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        # The tasks read the corpus with the same module.
        spark.sparkContext.addPyFile(str(PREPARE))
        files = stdlib_files()[1][: preset["files"]]
        rows = [(k, str(f)) for k, f in enumerate(files)]
        df = (
            spark.createDataFrame(rows, "file int, path string")
            .repartitionByRange(partitions, "file")
            .sortWithinPartitions("file")
            .mapInArrow(tokenize, "text string, file int, words int")
        )
        t0 = time.perf_counter()
        report = loaderx.spark.write(df, out / "corpus", codec=args.codec)
        t1 = time.perf_counter()
    finally:
        spark.stop()
    single = single_writer(files, out / "single", args.codec)
    t2 = time.perf_counter()
    same_records(out / "corpus", out / "single")
    assert report.records == single
    result = {
        "size": args.size,
        "files": len(files),
        "partitions": report.parts,
        "data_files": report.data_files,
        "cores": cores,
        "codec": args.codec,
        "records": report.records,
        "columns": list(report.columns),
        "seconds": {"spark_write": round(t1 - t0, 3), "single_writer": round(t2 - t1, 3)},
        "identical": True,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"spark_convert: {len(files)} stdlib files, {report.records} sentences in "
        f"{report.parts} partitions on local[{cores}]: loaderx.spark.write "
        f"{result['seconds']['spark_write']:.2f}s, one writer "
        f"{result['seconds']['single_writer']:.2f}s"
    )
    print(f"spark_convert: {out}/corpus equals the single writer's records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
