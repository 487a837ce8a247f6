"""examples/packed_lm end to end at its reduced size, once per framework, in a
subprocess: a token store from the stdlib's docstrings, a causal language model
trained on packed steps, on the same steps padded, and resumed from a checkpoint.

The assertions read the runs' own outputs (per-step losses, final parameters)
rather than the example's printed verdicts."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "examples" / "packed_lm"
# The packed/padded loss tolerance examples/packed_lm/README.md states.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("packed_lm")
    cmd = [sys.executable, str(HERE / "prepare.py"), "--out", str(out), "--max-words", "40000"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["vocab_size"] == 1024 and meta["records"] > 1000
    assert meta["length_max"] > 128  # some docstrings are cut to the budget
    return out


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_packed_lm_reduced(framework, data):
    pytest.importorskip(framework)
    cmd = [sys.executable, str(HERE / "train.py"), "--data", str(data), "--framework", framework]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    r = json.loads((data / "runs" / f"{framework}.json").read_text())
    packed, padded, resumed = (np.array(r["losses"][k]) for k in ("packed", "padded", "resumed"))
    steps, at = r["config"]["steps"], r["config"]["checkpoint_at"]
    assert (len(packed), len(padded), len(resumed)) == (steps, steps, steps - at)
    assert np.isfinite(packed).all()
    # From about ln(1024) = 6.93 nats; the reduced run ends near 5.3.
    assert packed[-5:].mean() < packed[:5].mean() - 1.0
    assert np.abs(packed - padded).max() <= TOLERANCE
    assert (resumed == packed[at:]).all()
    final = np.load(data / "runs" / f"{framework}-final.npz")
    again = np.load(data / "runs" / f"{framework}-resumed.npz")
    assert (
        sorted(final.files)
        == sorted(again.files)
        == sorted(["tok", "pos", "wq", "wk", "wv", "wo", "out"])
    )
    for k in final.files:
        assert final[k].dtype == np.float32
        assert final[k].tobytes() == again[k].tobytes(), k
    assert r["fill"] >= 0.97
