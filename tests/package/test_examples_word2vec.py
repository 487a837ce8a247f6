"""examples/word2vec end to end at its reduced size, once per framework, in a
subprocess: stores from the stdlib's docstrings, CBOW training on padded (Dense)
and packed (Ragged) contexts, a resume from a halfway checkpoint in a new process.

The assertions read the runs' own outputs (per-step losses, bytes per batch, final
parameters) rather than trusting the example's report."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "examples" / "word2vec" / "run.py"
# The padded/packed loss tolerance examples/word2vec/README.md states.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    # One data directory for both frameworks: the second run reuses the stores.
    return tmp_path_factory.mktemp("word2vec")


def result(out: Path, run: str) -> dict:
    return json.loads((out / "runs" / run / "result.json").read_text())


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_word2vec_reduced(framework, out):
    pytest.importorskip(framework)
    cmd = [sys.executable, str(RUN), "--size", "reduced", "--frameworks", framework]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--no-plot"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]

    meta = json.loads((out / "meta.json").read_text())
    runs = {layout: result(out, f"{framework}-{layout}") for layout in ("dense", "ragged")}
    for layout, r in runs.items():
        losses = np.array(r["losses"])
        assert len(losses) == r["steps"] > 0
        assert np.isfinite(losses).all(), layout
        tenth = len(losses) // 10
        # From ln(2048) = 7.62 nats at step 0; the reduced run ends near 5.9.
        assert losses[-tenth:].mean() < losses[:tenth].mean() - 0.5, layout

    dense, ragged = (np.array(runs[k]["losses"]) for k in ("dense", "ragged"))
    assert np.abs(dense - ragged).max() <= TOLERANCE

    batch = runs["dense"]["config"]["batch"]
    slots = meta["context_slots"]
    assert runs["dense"]["bytes_per_step"] == {"center": 4 * batch, "context": 4 * batch * slots}
    packed = runs["ragged"]["bytes_per_step"]
    assert packed["cu_seqlens"] == 4 * (batch + 1) and packed["shapes"] == 8 * batch
    assert 0 < packed["values"] < 4 * batch * slots
    assert runs["ragged"]["bytes_per_step_total"] < runs["dense"]["bytes_per_step_total"]

    for layout, full in runs.items():
        resumed = result(out, f"{framework}-{layout}-resumed")
        assert 0 < resumed["start"] < resumed["steps"] == full["steps"]
        assert resumed["losses"] == full["losses"], layout
        with (
            np.load(out / "runs" / f"{framework}-{layout}" / "params.npz") as a,
            np.load(out / "runs" / f"{framework}-{layout}-resumed" / "params.npz") as b,
        ):
            assert sorted(a.files) == sorted(b.files) == ["inp", "out_b", "out_w"]
            for k in a.files:
                assert a[k].tobytes() == b[k].tobytes(), f"{layout} {k}"
