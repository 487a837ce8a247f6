"""Warm block caches of several loaderx builds side by side, behind one nginx.

Runs ``loaderx_bench.remote_builds`` (benchmarks/loaderx_bench/remote_builds.py), which
documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.remote_builds")
