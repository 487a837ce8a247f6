"""examples/spark_convert at its reduced size, in a subprocess: the corpus
tokenized in Spark tasks and written by loaderx.spark.write, compared here with
what the corpus says, read without the example's code."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loaderx.zrecord import Dense, Ragged

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "spark_convert" / "convert.py"
sys.path.insert(0, str(ROOT / "examples" / "word2vec"))
from prepare import docstrings, sentences, stdlib_files  # noqa: E402


def test_spark_convert_reduced(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--size", "reduced", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert (result["cores"], result["partitions"]) == (2, 8)
    files = stdlib_files()[1][: result["files"]]
    want_text, want_file, want_words = [], [], []
    for number, f in enumerate(files):
        for doc in docstrings(f):
            for words in sentences(doc):
                want_text.append(" ".join(words).encode())
                want_file.append(number)
                want_words.append(len(words))
    assert len(want_text) == result["records"] > 1000
    with Ragged.open(out / "corpus" / "text") as t:
        assert [np.from_dlpack(x).tobytes() for x in t[:].to_tensors()] == want_text
        assert t.attrs is not None and t.attrs["utf8"] is True
    with Dense.open(out / "corpus" / "file") as d:
        np.testing.assert_array_equal(np.from_dlpack(d[:]), np.array(want_file, np.int32))
    with Dense.open(out / "corpus" / "words") as d:
        np.testing.assert_array_equal(np.from_dlpack(d[:]), np.array(want_words, np.int32))
