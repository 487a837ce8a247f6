"""Open time against record count (10k, 1M, 10M records; Dense and Ragged).

Runs ``loaderx_bench.open_time`` (benchmarks/loaderx_bench/open_time.py), which
documents it.
"""

import sys

try:
    from loaderx_bench.open_time import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
