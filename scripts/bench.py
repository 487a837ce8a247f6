"""End-to-end benchmark: loaderx's Loader against torch.utils.data.DataLoader.

Runs ``loaderx_bench.loader`` (benchmarks/loaderx_bench/loader.py), which documents it.
"""

import sys

try:
    from loaderx_bench.loader import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
