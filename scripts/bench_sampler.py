"""Benchmark: the Sampler's time per ``next()`` from Python.

Compares, in one run on the same machine:

* ``loaderx.sampler.Sampler`` (this tree) in all three modes;
* NumPy's modern API, ``rng.integers(0, length, B)`` on ``np.random.default_rng(seed)``,
  the IID baseline;
* the published ``loaderx`` 2.8.6 Sampler as a black box (its public API only), run
  in its own virtual environment ``.venv-peer`` through a subprocess. Create it with

      python3 -m venv .venv-peer && .venv-peer/bin/pip install loaderx==2.8.6 numpy

Outputs are verified first (shape, dtype, range; for this tree also the exact
values against the pure-Python reference in ``tests/sampler_reference.py``), then
timed. Each figure is the median over timed blocks of the mean time per call in a
block of ``--block`` calls; rounds alternate between the contenders so that load
changes hit all of them.

Usage: python scripts/bench_sampler.py [--length 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
PEER_PYTHON = REPO / ".venv-peer" / "bin" / "python"
BATCHES = (64, 256, 1024, 4096)
SEED = 42

# Runs under the peer's interpreter: verify, then time blocks of calls; one JSON line.
PEER_SNIPPET = r"""
import json, sys, time
import numpy as np
from loaderx.sampler import Sampler
length, batches, modes, block, blocks = json.loads(sys.argv[1])
out = {}
for mode in modes:
    for b in batches:
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
        out[f"{mode}/{b}"] = per_call
import loaderx
print(json.dumps({"version": getattr(loaderx, "__version__", "?"), "times": out}))
"""


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    cores = len(os.sched_getaffinity(0))
    return (
        f"{model}, {cores} cores, Linux {platform.release()}, "
        f"Python {platform.python_version()}, NumPy {np.__version__}"
    )


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


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
    sys.path.insert(0, str(REPO / "tests"))
    import sampler_reference as ref

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


def peer_times(length: int, modes: list[str], block: int, blocks: int) -> tuple[dict, str]:
    """({"MODE/B": [seconds per call, ...]}, version) or ({}, reason)."""
    if not PEER_PYTHON.exists():
        return {}, f"not available: {PEER_PYTHON} is missing (see this script's docstring)"
    arg = json.dumps([length, list(BATCHES), modes, block, blocks])
    proc = subprocess.run(
        [str(PEER_PYTHON), "-c", PEER_SNIPPET, arg], capture_output=True, text=True, cwd="/"
    )
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no output"]
        return {}, f"not available: the peer run failed: {lines[-1]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["times"], f"loaderx {result['version']}"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds")
    ap.add_argument("--block", type=int, default=200, help="calls per timed block")
    ap.add_argument("--blocks", type=int, default=25, help="timed blocks per round")
    args = ap.parse_args()

    from loaderx.sampler import Sampler

    length = args.length
    print(f"machine: {machine()}")
    print(f"load average at start: {load_average()}")
    verify_ours(length)
    print("verified: shape, dtype, range and exact values (this tree); peer checked in its run")

    modes = ["SEQUENTIAL", "IID", "CYCLIC"]
    ours: dict[str, list[float]] = {f"{m}/{b}": [] for m in modes for b in BATCHES}
    numpy_t: dict[int, list[float]] = {b: [] for b in BATCHES}
    peer: dict[str, list[float]] = {}
    peer_label = ""
    for _ in range(args.rounds):
        for b in BATCHES:
            for m in modes:
                s = Sampler(length, b, getattr(Sampler.Mode, m), seed=SEED)
                ours[f"{m}/{b}"] += time_blocks(s.next, args.block, args.blocks)
            rng = np.random.default_rng(SEED)
            probe = rng.integers(0, length, b)
            assert probe.shape == (b,) and int(probe.max()) < length
            numpy_t[b] += time_blocks(
                lambda rng=rng, b=b: rng.integers(0, length, b), args.block, args.blocks
            )
        times, peer_label = peer_times(length, modes, args.block, args.blocks)
        for k, v in times.items():
            peer.setdefault(k, []).extend(v)

    def med(values):
        return statistics.median(values) if values else None

    print(f"load average at end: {load_average()}")
    print(f"peer: {peer_label}")
    print()
    print(f"IID, length {length:,}: median µs per call (next() / rng.integers)")
    print()
    rows = []
    for b in BATCHES:
        o, n, p = med(ours[f"IID/{b}"]), med(numpy_t[b]), med(peer.get(f"IID/{b}", []))
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
            row += [fmt_us(med(ours[f"{m}/{b}"])), fmt_us(med(peer.get(f"{m}/{b}", [])))]
        rows.append(row)
    headers = ["B"]
    for m in modes:
        headers += [f"{m} this", f"{m} 2.8.6"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
