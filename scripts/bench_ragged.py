"""Random batch gather of variable-shape records, against the stores a user might pick instead.

Runs ``loaderx_bench.ragged`` (benchmarks/loaderx_bench/ragged.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.ragged")
