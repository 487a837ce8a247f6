"""Random gathers through the Loader from a store served over HTTP on 127.0.0.1 with
0 to 50 ms of added latency, against the same store on local disk.

Runs ``loaderx_bench.remote`` (benchmarks/loaderx_bench/remote.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.remote")
