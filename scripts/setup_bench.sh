#!/usr/bin/env bash
# Makes the two environments the benchmarks run in:
#   .venv       loaderx built from this checkout (scripts/setup_venv.sh, with the
#               extras in EXTRAS, default test) plus the benchmark package
#               benchmarks/ (loaderx_bench), installed editable with its
#               dependencies: torch, pyarrow, h5py, lmdb, array-record, pylance,
#               matplotlib and what the dataset preparation needs.
#   .venv-peer  the published loaderx 2.8.6 (and NumPy) that the bench scripts
#               measure as "loaderx 2.8.6"; PEER_VENV picks another folder.
#   .venv-engines  with ENGINES=1: MosaicML Streaming and LitData over .venv's
#               packages, for scripts/bench_engine_write.py.
# Running it again updates both; packages already installed are kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# setup_venv.sh installs ".[$EXTRAS]", which pip refuses with no extra named.
EXTRAS="${EXTRAS:-test}"
# shellcheck source=setup_venv.sh
source scripts/setup_venv.sh
.venv/bin/python -m pip install -q -e benchmarks/
peer="${PEER_VENV:-.venv-peer}"
[ -x "$peer/bin/python" ] || python3 -m venv "$peer"
"$peer/bin/python" -m pip install -q --upgrade pip
"$peer/bin/python" -m pip install -q "loaderx==2.8.6" numpy
# The servers the remote benchmarks read from (benchmarks/loaderx_bench/servers.py):
# nginx from Debian (as root) with its echo module, whose timer delays answers
# (the kernel here has no netem), and s3s-fs (scripts/build_s3s_fs.sh), each kept
# when already there.
echo_module=/usr/share/nginx/modules/ngx_http_echo_module.so
if { ! command -v nginx >/dev/null || [ ! -e "$echo_module" ]; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q nginx libnginx-mod-http-echo
fi
if ! command -v s3s-fs-nodelay >/dev/null && [ ! -x "$HOME/.cargo/bin/s3s-fs-nodelay" ]; then
    nice bash scripts/build_s3s_fs.sh
fi
# .venv-engines (ENGINES=1): MosaicML Streaming and LitData for
# scripts/bench_engine_write.py. Streaming pins an older NumPy, so they get a venv
# of their own that sees .venv's packages (loaderx, pyspark, ...) after its own.
if [ "${ENGINES:-0}" = 1 ]; then
    eng=.venv-engines
    [ -x "$eng/bin/python" ] || python3 -m venv "$eng"
    "$eng/bin/python" -m pip install -q --upgrade pip
    "$eng/bin/python" -m pip install -q "mosaicml-streaming==0.13.0" "litdata==0.2.76"
    purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
    # addsitedir, not a bare path: .venv's own .pth files (loaderx's editable
    # install among them) must be read too.
    echo "import site; site.addsitedir('$(.venv/bin/python -c "$purelib")')" \
        > "$("$eng/bin/python" -c "$purelib")/zz_loaderx_venv.pth"
    echo "$eng: mosaicml-streaming, litdata, and .venv's packages after them"
fi
echo ".venv: loaderx from this checkout + [$EXTRAS] + benchmarks/; $peer: loaderx $("$peer/bin/python" -c \
    'import importlib.metadata as m; print(m.version("loaderx"))')"
