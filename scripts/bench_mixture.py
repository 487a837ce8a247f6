"""Benchmark: MixtureSampler's time per ``next()`` from Python.

Runs ``loaderx_bench.mixture`` (benchmarks/loaderx_bench/mixture.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.mixture")
