"""Hardware check of the CUDA allocator, for a machine with an NVIDIA GPU.

Runs ``loaderx_bench.gpu_check`` (benchmarks/loaderx_bench/gpu_check.py), which documents it.
"""

import sys

try:
    from loaderx_bench.gpu_check import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
