"""Draws the benchmark plots of docs/benchmarks.md from the JSON the bench scripts write.

Runs ``loaderx_bench.plot`` (benchmarks/loaderx_bench/plot.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.plot")
