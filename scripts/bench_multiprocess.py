"""Benchmark: data-parallel Loader throughput with 1, 2 and 4 processes.

Runs ``loaderx_bench.multiprocess`` (benchmarks/loaderx_bench/multiprocess.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.multiprocess")
