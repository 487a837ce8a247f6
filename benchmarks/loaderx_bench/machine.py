"""The machine a benchmark runs on: what it is, which loaderx it measures, how
loaded it is, and a lock so that benchmarks sharing it do not time each other.

Only the standard library and NumPy are imported here, as in every module a
worker process loads (``workers``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from loaderx_bench.paths import REPO


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
