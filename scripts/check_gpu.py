"""Hardware check of the CUDA allocator, for a machine with an NVIDIA GPU.

Runs ``loaderx_bench.gpu_check`` (benchmarks/loaderx_bench/gpu_check.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.gpu_check")
