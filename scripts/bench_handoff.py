"""The Loader against the bare gather, and the cost of its statistics.

Runs ``loaderx_bench.handoff`` (benchmarks/loaderx_bench/handoff.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.handoff")
