"""Draws the benchmark plots of docs/benchmarks.md from the JSON the bench scripts write.

Runs ``loaderx_bench.plot`` (benchmarks/loaderx_bench/plot.py), which documents it.
"""

import sys

try:
    from loaderx_bench.plot import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
