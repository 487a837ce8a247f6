#!/usr/bin/env bash
# The main job: build stores from scikit-learn's bundled digits and load from them.
EXTRAS=demo source "$(dirname "$0")/setup_venv.sh"
.venv/bin/python examples/digits.py --out data/demo "$@"
