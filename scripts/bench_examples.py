"""Per-step time of the examples' input pipelines: loaderx against a torch DataLoader over .npy.

Runs ``loaderx_bench.example_pipelines`` (benchmarks/loaderx_bench/example_pipelines.py), which
documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.example_pipelines")
