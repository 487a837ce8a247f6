"""Benchmark: the Sampler's time per ``next()`` from Python.

Compares, in one run on the same machine:

* ``loaderx.sampler.Sampler`` (this tree) in all three modes;
* NumPy's modern API, ``rng.integers(0, length, B)`` on ``np.random.default_rng(seed)``,
  the IID baseline;
* the published ``loaderx`` 2.8.6 Sampler as a black box (its public API only), run
  in its own virtual environment ``.venv-peer`` through a subprocess. Create it with

      python3 -m venv .venv-peer && .venv-peer/bin/pip install loaderx==2.8.6 numpy

Outputs are verified first (shape, dtype, range; for this tree also the exact
values against the pure-Python reference the tests hold it to,
``tests/support/sampler_reference.py``),
then timed. Each figure is the median over timed blocks of the mean time per call in a
block of ``--block`` calls. The contenders take turns for every (mode, B) within
each round (the peer as a persistent worker process), so that changes in machine
load hit all of them alike.

Usage: python scripts/bench_sampler.py [--length 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import time
from types import ModuleType

import numpy as np

from loaderx_bench.machine import load_average, machine
from loaderx_bench.paths import REPO


def _reference() -> ModuleType:
    """The tests' sampler reference model, loaded from the checkout: the outputs
    timed here are checked against the same model as the native Sampler's."""
    path = REPO / "tests" / "support" / "sampler_reference.py"
    spec = importlib.util.spec_from_file_location("sampler_reference", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{path}: the sampler reference model is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _reference()

PEER_PYTHON = REPO / ".venv-peer" / "bin" / "python"
BATCHES = (64, 256, 1024, 4096)
SEED = 42

# Runs under the peer's interpreter as a worker: for each request line
# [mode, B, block, blocks] it verifies the output, times blocks of calls and answers
# one JSON line, so that the three contenders are measured side by side.
PEER_WORKER = r"""
import json, sys, time
import numpy as np
import loaderx
from loaderx.sampler import Sampler
length = int(sys.argv[1])
print(json.dumps({"version": getattr(loaderx, "__version__", "?")}), flush=True)
for line in sys.stdin:
    mode, b, block, blocks = json.loads(line)
    s = Sampler(length, b, getattr(Sampler.Mode, mode), seed=42)
    a = s.next()
    if not (isinstance(a, np.ndarray) and a.dtype == np.uint64 and a.shape == (b,)
            and int(a.max()) < length):
        raise SystemExit(f"peer {mode} B={b}: unexpected output {type(a)} {a.dtype} {a.shape}")
    nxt = s.next
    for _ in range(block):
        nxt()
    per_call = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(block):
            nxt()
        per_call.append((time.perf_counter() - t0) / block)
    print(json.dumps(per_call), flush=True)
"""


class Peer:
    """The published Sampler, driven in its own interpreter; ``reason`` is set when
    it is not available."""

    def __init__(self, length: int) -> None:
        self.proc = None
        self.label = ""
        self.reason = ""
        if not PEER_PYTHON.exists():
            self.reason = f"not available: {PEER_PYTHON} is missing (see this script's docstring)"
            return
        self.proc = subprocess.Popen(
            [str(PEER_PYTHON), "-c", PEER_WORKER, str(length)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        hello = self._read()
        if hello is not None:
            self.label = f"loaderx {hello['version']}"

    def _read(self):
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = (self.proc.stderr.read() if self.proc.stderr else "").strip().splitlines()
            self.reason = "not available: the peer run failed: " + (err[-1] if err else "?")
            self.proc = None
            return None
        return json.loads(line)

    def time(self, mode: str, b: int, block: int, blocks: int) -> list[float]:
        if self.proc is None or self.proc.stdin is None:
            return []
        self.proc.stdin.write(json.dumps([mode, b, block, blocks]) + "\n")
        self.proc.stdin.flush()
        return self._read() or []

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def time_blocks(call, block: int, blocks: int) -> list[float]:
    """Mean seconds per call of ``blocks`` blocks of ``block`` calls (after a warm-up)."""
    for _ in range(block):
        call()
    per_call = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(block):
            call()
        per_call.append((time.perf_counter() - t0) / block)
    return per_call


def verify_ours(length: int) -> None:
    from loaderx.sampler import Sampler

    for mode in Sampler.Mode:
        for b in BATCHES:
            s = Sampler(length, b, mode, seed=SEED)
            a = s.next()
            assert a.dtype == np.uint64 and a.shape == (b,) and int(a.max()) < length
            s.seek(7)
            again = s.next()
            assert again is a, "next() must return the one reusable buffer"
            assert again.tolist() == ref.batch(mode.name, length, b, SEED, 7), (mode, b)


def fmt_us(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e6:.2f}"


def fmt_ratio(num: float | None, den: float | None) -> str:
    return "n/a" if num is None or den is None else f"{num / den:.1f}x"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    sep = "|" + "|".join(["-" * (widths[0] + 2)] + ["-" * (w + 1) + ":" for w in widths[1:]]) + "|"
    body = [
        "| "
        + " | ".join(
            (c.ljust(w) if i == 0 else c.rjust(w))
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        + " |"
        for r in rows
    ]
    return "\n".join([line, sep, *body])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds")
    ap.add_argument("--block", type=int, default=200, help="calls per timed block")
    ap.add_argument("--blocks", type=int, default=25, help="timed blocks per round")
    args = ap.parse_args(argv)

    from loaderx.sampler import Sampler

    length = args.length
    print(f"machine: {machine()}")
    print(f"load average at start: {load_average()}")
    verify_ours(length)
    print("verified: shape, dtype, range and exact values (this tree); peer checked in its run")

    modes = ["SEQUENTIAL", "IID", "CYCLIC"]
    ours: dict[str, list[float]] = {f"{m}/{b}": [] for m in modes for b in BATCHES}
    numpy_t: dict[int, list[float]] = {b: [] for b in BATCHES}
    peer_t: dict[str, list[float]] = {f"{m}/{b}": [] for m in modes for b in BATCHES}
    peer = Peer(length)
    try:
        for _ in range(args.rounds):
            for b in BATCHES:
                rng = np.random.default_rng(SEED)
                probe = rng.integers(0, length, b)
                assert probe.shape == (b,) and int(probe.max()) < length
                numpy_t[b] += time_blocks(
                    lambda rng=rng, b=b: rng.integers(0, length, b), args.block, args.blocks
                )
                for m in modes:
                    s = Sampler(length, b, getattr(Sampler.Mode, m), seed=SEED)
                    ours[f"{m}/{b}"] += time_blocks(s.next, args.block, args.blocks)
                    peer_t[f"{m}/{b}"] += peer.time(m, b, args.block, args.blocks)
    finally:
        peer.close()
    peer_label = peer.label if not peer.reason else peer.reason

    def med(values):
        return statistics.median(values) if values else None

    print(f"load average at end: {load_average()}")
    print(f"peer: {peer_label}")
    print()
    print(f"IID, length {length:,}: median µs per call (next() / rng.integers)")
    print()
    rows = []
    for b in BATCHES:
        o, n, p = med(ours[f"IID/{b}"]), med(numpy_t[b]), med(peer_t[f"IID/{b}"])
        rows.append([str(b), fmt_us(o), fmt_us(n), fmt_us(p), fmt_ratio(n, o), fmt_ratio(p, o)])
    print(
        table(
            ["B", "loaderx (this)", "NumPy", "loaderx 2.8.6", "vs NumPy", "vs 2.8.6"],
            rows,
        )
    )
    print()
    print(f"All modes, length {length:,}: median µs per next()")
    print()
    rows = []
    for b in BATCHES:
        row = [str(b)]
        for m in modes:
            row += [fmt_us(med(ours[f"{m}/{b}"])), fmt_us(med(peer_t[f"{m}/{b}"]))]
        rows.append(row)
    headers = ["B"]
    for m in modes:
        headers += [f"{m} this", f"{m} 2.8.6"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
