"""Benchmark: PackingSampler's fill and plan cost on the real token records.

Runs ``loaderx_bench.packing`` (benchmarks/loaderx_bench/packing.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.packing")
