"""Conversion on an engine: loaderx.spark.write against MosaicML Streaming's
dataframe_to_mds and LitData's optimize, then each output's gather rate.

Runs ``loaderx_bench.engine_write`` (benchmarks/loaderx_bench/engine_write.py),
which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.engine_write")
