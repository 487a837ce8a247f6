"""Where the loaderx checkout is: its data, its results and its peer venv live there.

The package is installed editable from ``benchmarks/`` of the checkout, so the
checkout is the folder above that; an install anywhere else is refused, since the
benchmarks would then read and write in the wrong place.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
BENCHMARKS = PACKAGE.parent
REPO = BENCHMARKS.parent
DATA = REPO / "data"

if not (BENCHMARKS / "pyproject.toml").is_file() or not (REPO / "scripts").is_dir():
    raise RuntimeError(
        f"loaderx_bench at {PACKAGE} is not in benchmarks/ of a loaderx checkout; "
        "install it editable from there: bash scripts/setup_bench.sh"
    )
