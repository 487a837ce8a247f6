"""examples/parallel_convert at its reduced size, in a subprocess: part stores
written by two worker processes, concatenated, compared with one writer's.

The assertions open the stores themselves rather than trusting the example's
report: the concatenated stores hold, record for record, what one writer wrote and
what the corpus says, and the parts are the result's records in order."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from loaderx.zrecord import Dense, Ragged

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "parallel_convert" / "convert.py"
sys.path.insert(0, str(ROOT / "examples" / "word2vec"))
from prepare import docstrings, sentences, stdlib_files  # noqa: E402


def texts(path: Path) -> list[bytes]:
    with Ragged.open(path) as r:
        return [np.from_dlpack(t).tobytes() for t in r[:].to_tensors()] if len(r) else []


def rows(path: Path) -> np.ndarray:
    with Dense.open(path) as d:
        return np.array(np.from_dlpack(d[:]))


def test_parallel_convert_reduced(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--size", "reduced", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    assert result["workers"] == 2 and result["parts"] > 2

    # What the corpus says, read here without the example's code.
    files = stdlib_files()[1][: result["files"]]
    want_text, want_rows = [], []
    for number, f in enumerate(files):
        for doc in docstrings(f):
            for words in sentences(doc):
                want_text.append(" ".join(words).encode())
                want_rows.append((number, len(words)))
    assert len(want_text) == result["records"] > 1000

    assert texts(out / "text") == texts(out / "single" / "text") == want_text
    source = rows(out / "source")
    assert source.dtype == np.int32
    assert np.array_equal(source, np.array(want_rows, np.int32))
    assert np.array_equal(source, rows(out / "single" / "source"))

    parts = sorted((out / "parts").iterdir())
    assert len(parts) == result["parts"]
    assert [len(texts(p / "text")) for p in parts] == result["part_records"]
    assert sum((texts(p / "text") for p in parts), []) == want_text
    with Ragged.open(out / "text") as t, Dense.open(out / "source") as s:
        t.verify()
        s.verify()
        # One data file per part, linked (the parts are beside the result).
        assert t.data_shards == s.data_shards == len(parts)
    assert result["linked_files"] == 2 * len(parts) and result["copied_files"] == 0
