"""What every script here does: run the ``main(argv)`` of a module of the
benchmark package, or say how to install that package when it is missing."""

import importlib
import sys


def run(module: str) -> None:
    try:
        main = importlib.import_module(module).main
    except ModuleNotFoundError as e:
        if e.name != "loaderx_bench":
            raise
        print("loaderx_bench is not installed: run bash scripts/setup_bench.sh", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
