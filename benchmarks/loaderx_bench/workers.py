"""Worker processes: every measurement runs in a fresh interpreter, as ``python -m
loaderx_bench.<module> --worker ...``, and answers one JSON line.

A worker may run under another interpreter than the main side's: the published
loaderx's venv (``.venv-peer``), which has only that loaderx and NumPy and not this
package. Workers therefore find the package through ``PYTHONPATH``, and every
module a worker imports from it needs only the standard library and NumPy at
import time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from loaderx_bench.paths import BENCHMARKS, REPO


def worker_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus `env`, with the folder holding this package
    first on ``PYTHONPATH``."""
    path = [str(BENCHMARKS), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(path)}


def run_worker(
    python: str | os.PathLike[str],
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> dict:
    """Runs ``python argv...`` and returns the JSON object on its last stdout line.

    Raises RuntimeError carrying the worker's stderr when it fails, and
    subprocess.TimeoutExpired when it runs past `timeout` seconds."""
    proc = subprocess.run(
        [str(python), *argv],
        capture_output=True,
        text=True,
        env=worker_env(env),
        timeout=timeout,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        raise RuntimeError(f"worker exited with {proc.returncode}: {tail[0][:300]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def emit(result: dict) -> None:
    """Worker side of ``run_worker``: prints the result as the last stdout line."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def run_backend(python, argv: Sequence[str], env: dict | None, budget: float) -> dict:
    """Runs one worker with a wall-clock budget; a worker past it is reported as
    too slow, a crash as failed."""
    try:
        return run_worker(python, argv, env, timeout=budget)
    except subprocess.TimeoutExpired:
        return {"status": "too slow", "reason": f"did not finish within {budget:g} s"}
    except RuntimeError as e:
        return {"status": "failed", "reason": str(e)}


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
