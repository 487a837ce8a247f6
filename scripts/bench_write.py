"""Dense append throughput and writer memory, from one memory-mapped .npy source.

Runs ``loaderx_bench.write`` (benchmarks/loaderx_bench/write.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.write")
