"""Random gathers through the Loader from a store served over HTTP on 127.0.0.1 with
0 to 50 ms of added latency, against the same store on local disk.

Runs ``loaderx_bench.remote`` (benchmarks/loaderx_bench/remote.py), which documents it.
"""

import sys

try:
    from loaderx_bench.remote import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
