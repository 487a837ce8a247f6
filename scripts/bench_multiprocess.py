"""Benchmark: data-parallel Loader throughput with 1, 2 and 4 processes.

Runs ``loaderx_bench.multiprocess`` (benchmarks/loaderx_bench/multiprocess.py), which documents it.
"""

import sys

try:
    from loaderx_bench.multiprocess import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
