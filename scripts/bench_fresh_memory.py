"""How fast this machine hands a process memory it has not used before.

Runs ``loaderx_bench.fresh_memory`` (benchmarks/loaderx_bench/fresh_memory.py),
which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.fresh_memory")
