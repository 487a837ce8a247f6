"""Where a 1-core Spark task of loaderx.spark.write spends its time.

Runs ``loaderx_bench.engine_task`` (benchmarks/loaderx_bench/engine_task.py),
which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.engine_task")
