"""At scale: stores of millions of tiny records behind nginx, at 0 and 50 ms.

Runs ``loaderx_bench.at_scale`` (benchmarks/loaderx_bench/at_scale.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.at_scale")
