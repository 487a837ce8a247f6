"""loaderx, LitData and MosaicML Streaming over the same S3 server and latency.

Runs ``loaderx_bench.streaming_peers`` (benchmarks/loaderx_bench/handoff.py), which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.streaming_peers")
