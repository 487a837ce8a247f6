"""Conversion throughput with 1 and 2 worker processes writing part stores joined
by ``concat``, against one writer.

Runs ``loaderx_bench.parallel_convert`` (benchmarks/loaderx_bench/parallel_convert.py),
which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.parallel_convert")
