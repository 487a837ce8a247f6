#!/usr/bin/env bash
# The whole test suite: Rust core tests, then the Python tests.
EXTRAS=test source "$(dirname "$0")/setup_venv.sh"
cargo test --workspace --exclude loaderx-py -q
.venv/bin/python -m pytest -q "$@"
