"""What checked reads cost, and what zstd frame checksums would cost.

Runs ``loaderx_bench.checked`` (benchmarks/loaderx_bench/checked.py), which
documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.checked")
