"""Open time against record count (10k, 1M, 10M records; Dense and Ragged).

Runs ``loaderx_bench.open_time`` (benchmarks/loaderx_bench/open_time.py), which
documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.open_time")
