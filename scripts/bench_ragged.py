"""Random batch gather of variable-shape records, against the stores a user might pick instead.

Runs ``loaderx_bench.ragged`` (benchmarks/loaderx_bench/ragged.py), which documents it.
"""

import sys

try:
    from loaderx_bench.ragged import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
