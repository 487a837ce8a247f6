"""Gathers of tiny records from a cache's memory against the local store.

Runs ``loaderx_bench.warm_gather`` (benchmarks/loaderx_bench/warm_gather.py),
which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.warm_gather")
