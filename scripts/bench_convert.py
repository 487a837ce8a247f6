"""Converter throughput against save_to_disk and Parquet, on datasets built offline.

Runs ``loaderx_bench.convert`` (benchmarks/loaderx_bench/convert.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.convert")
