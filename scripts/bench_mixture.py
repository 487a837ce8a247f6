"""Benchmark: MixtureSampler's time per ``next()`` from Python.

Runs ``loaderx_bench.mixture`` (benchmarks/loaderx_bench/mixture.py), which documents it.
"""

import sys

try:
    from loaderx_bench.mixture import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
