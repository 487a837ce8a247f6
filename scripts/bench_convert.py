"""Converter throughput against save_to_disk and Parquet, on datasets built offline.

Runs ``loaderx_bench.convert`` (benchmarks/loaderx_bench/convert.py), which documents it.
"""

import sys

try:
    from loaderx_bench.convert import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
