"""Per-step time of the examples' input pipelines: loaderx against a torch DataLoader over .npy.

Runs ``loaderx_bench.example_pipelines`` (benchmarks/loaderx_bench/example_pipelines.py), which
documents it.
"""

import sys

try:
    from loaderx_bench.example_pipelines import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
