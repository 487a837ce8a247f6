# Sourced by demo.sh and test.sh: makes .venv with loaderx built from this checkout
# plus the extras named in $EXTRAS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v cargo >/dev/null; then
    echo "cargo (Rust) is needed to build loaderx from source" >&2
    exit 1
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip maturin
.venv/bin/python -m pip install -q -e ".[${EXTRAS}]"
