"""Random batch gather of fixed-shape records, against the stores a user might pick instead.

Runs ``loaderx_bench.dense`` (benchmarks/loaderx_bench/dense.py), which documents it.
"""

import sys

try:
    from loaderx_bench.dense import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
