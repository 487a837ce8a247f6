#!/usr/bin/env python3
"""Build the real-photo benchmark data (dense 224x224 crops and ragged native images).

Runs ``loaderx_bench.prepare.vision`` (benchmarks/loaderx_bench/prepare/vision.py),
which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.prepare.vision")
