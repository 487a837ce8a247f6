"""Random batch gather of fixed-shape records, against the stores a user might pick instead.

Runs ``loaderx_bench.dense`` (benchmarks/loaderx_bench/dense.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.dense")
