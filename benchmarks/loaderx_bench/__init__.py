"""Benchmarks of loaderx against the stores and loaders a user might pick instead,
and the preparation of the real datasets they run on.

Each benchmark is a module with a ``main(argv)``; ``scripts/*.py`` are the commands
that run them. Installed editable from ``benchmarks/`` of a loaderx checkout
(``bash scripts/setup_bench.sh``); the loaderx measured is the one installed from
that checkout, not a dependency of this package.
"""
