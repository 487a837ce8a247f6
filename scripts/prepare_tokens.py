#!/usr/bin/env python3
"""Build the real-text token benchmark data (variable-length records and a dense view).

Runs ``loaderx_bench.prepare.tokens`` (benchmarks/loaderx_bench/prepare/tokens.py),
which documents it.
"""

import sys

try:
    from loaderx_bench.prepare.tokens import main
except ModuleNotFoundError as e:
    if e.name != "loaderx_bench":
        raise
    print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
