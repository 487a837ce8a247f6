"""Conversion throughput with 1 and 2 worker processes writing part stores joined
by ``concat``, against one writer.

Runs ``loaderx_bench.parallel_convert`` (benchmarks/loaderx_bench/parallel_convert.py),
which documents it.
"""

import sys

try:
    from loaderx_bench.parallel_convert import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
