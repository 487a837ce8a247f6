"""Random gathers of the loaderx builds of several git revisions, side by side.

Runs ``loaderx_bench.builds`` (benchmarks/loaderx_bench/builds.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.builds")
