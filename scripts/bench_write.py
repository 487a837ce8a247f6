"""Dense append throughput and writer memory, from one memory-mapped .npy source.

Runs ``loaderx_bench.write`` (benchmarks/loaderx_bench/write.py), which documents it.
"""

import sys

try:
    from loaderx_bench.write import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
