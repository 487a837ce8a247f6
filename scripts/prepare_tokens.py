#!/usr/bin/env python3
"""Build the real-text token benchmark data (variable-length records and a dense view).

Runs ``loaderx_bench.prepare.tokens`` (benchmarks/loaderx_bench/prepare/tokens.py),
which documents it.
"""

from _entry import run

if __name__ == "__main__":
    run("loaderx_bench.prepare.tokens")
