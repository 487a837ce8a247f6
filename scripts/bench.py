"""End-to-end benchmark: loaderx's Loader against torch.utils.data.DataLoader.

Runs ``loaderx_bench.loader`` (benchmarks/loaderx_bench/loader.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.loader")
