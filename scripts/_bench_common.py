"""Helpers shared by the ``bench_*.py`` scripts.

Only the standard library and NumPy are imported here, so a script can also run
under another interpreter (a peer's virtual environment) as a worker process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
GIB = 1024**3
MIB = 1024**2


def machine() -> str:
    """One line describing the CPU, the cores this process may use, RAM and software."""
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    ram_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            ram_kib = int(line.split()[1])
    cores = len(os.sched_getaffinity(0))
    return (
        f"{model}, {cores} cores, {ram_kib / 1024**2:.1f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}, "
        f"NumPy {np.__version__}"
    )


@contextlib.contextmanager
def one_bench_at_a_time() -> Iterator[None]:
    """Holds a lock file in the temp directory so that bench scripts using this
    helper do not time each other on a shared machine."""
    with open(Path(tempfile.gettempdir()) / "loaderx-bench.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def checkout() -> str:
    """Commit of this checkout, marked dirty when its Rust or Python sources differ
    from it (the built extension may then include uncommitted changes)."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "crates", "python")
    return sha + (" + uncommitted changes in crates/ or python/" if dirty else "")


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages: other work on the machine skews timings."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def p95(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values), 95))


def time_calls(
    call: Callable[[np.ndarray], object], draw: Callable[[], np.ndarray], min_seconds: float
) -> list[float]:
    """Latencies (s) of ``call(draw())`` until they sum to ``min_seconds``.

    Drawing the argument and dropping the result happen outside the timed span."""
    latencies: list[float] = []
    total = 0.0
    while total < min_seconds:
        arg = draw()
        start = time.perf_counter()
        result = call(arg)
        elapsed = time.perf_counter() - start
        del result
        latencies.append(elapsed)
        total += elapsed
    return latencies


def disk_bytes(path: str | os.PathLike[str]) -> int:
    """Allocated bytes of a file, or of every file under a directory."""
    p = Path(path)
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    return sum(f.stat().st_blocks * 512 for f in files)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table: first column left-aligned, the others right-aligned."""
    cells = [list(map(str, headers)), *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "| " + " | ".join([first, *rest]) + " |"

    rule = [":" + "-" * (widths[0] + 1)] + ["-" * (w + 1) + ":" for w in widths[1:]]
    return "\n".join([line(cells[0]), "|" + "|".join(rule) + "|", *map(line, cells[1:])])


def run_worker(
    python: str | os.PathLike[str], argv: Sequence[str], env: dict[str, str] | None = None
) -> dict:
    """Runs ``python argv...`` and returns the JSON object on its last stdout line.

    Raises RuntimeError carrying the worker's stderr when it fails."""
    proc = subprocess.run(
        [str(python), *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        raise RuntimeError(f"worker exited with {proc.returncode}: {tail[0]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def emit(result: dict) -> None:
    """Worker side of ``run_worker``: prints the result as the last stdout line."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def peer_python(explicit: str | None) -> tuple[Path | None, str]:
    """Interpreter of the published-peer venv (default ``.venv-peer`` at the repository
    root) and, when it cannot be used, why."""
    path = Path(explicit) if explicit else REPO / ".venv-peer" / "bin" / "python"
    if not path.exists():
        return None, f"no interpreter at {explicit or '.venv-peer/bin/python'}"
    probe = subprocess.run(
        [str(path), "-c", "import importlib.metadata as m; print(m.version('loaderx'))"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return None, "loaderx is not installed in the peer venv"
    return path, probe.stdout.strip()
