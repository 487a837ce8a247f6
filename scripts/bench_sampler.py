"""Benchmark: the Sampler's time per ``next()`` from Python.

Runs ``loaderx_bench.sampler`` (benchmarks/loaderx_bench/sampler.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.sampler")
