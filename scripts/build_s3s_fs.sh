#!/usr/bin/env bash
# Builds the S3 server the remote benchmarks read from: s3s-fs 0.14.1 (the newest
# that builds with a Rust older than 1.96) from the crate registry, with one line
# added: TCP_NODELAY on each connection it accepts, installed as
# ~/.cargo/bin/s3s-fs-nodelay.
#
# Why the change: as published, s3s-fs leaves Nagle's algorithm on. hyper sends a
# response's headers as soon as they are ready and its body in a later write, and
# Nagle can hold that write until the client acknowledges the headers, which a
# client's delayed acknowledgement puts off by up to 40 ms (docs/benchmarks.md,
# "Runs of 3ade611": s3s-fs with TCP_NODELAY). nginx sets TCP_NODELAY on its
# connections; a benchmark of a reader's round trips must not time the server's
# 40 ms stalls.
set -euo pipefail
version=0.14.1
dest="$HOME/.cargo/bin/s3s-fs-nodelay"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A throwaway package that depends on the crate makes cargo fetch its source.
mkdir "$work/fetch" "$work/fetch/src"
touch "$work/fetch/src/lib.rs"
cat >"$work/fetch/Cargo.toml" <<TOML
[package]
name = "fetch-s3s-fs"
version = "0.0.0"
edition = "2021"
[dependencies]
s3s-fs = "=$version"
TOML
manifest=$(cargo metadata -q --format-version 1 --manifest-path "$work/fetch/Cargo.toml" \
    | python3 -c 'import json, sys
print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "s3s-fs"))')
cp -r "$(dirname "$manifest")" "$work/s3s-fs"
accept='        let conn = http_server.serve_connection(TokioIo::new(socket), service.clone());'
main="$work/s3s-fs/src/main.rs"
if [ "$(grep -cxF "$accept" "$main")" != 1 ]; then
    echo "s3s-fs $version's src/main.rs is not as expected; not patched" >&2
    exit 1
fi
python3 - "$main" "$accept" <<'PY'
import sys
path, accept = sys.argv[1], sys.argv[2]
text = open(path).read()
open(path, "w").write(text.replace(accept, "        let _ = socket.set_nodelay(true);\n" + accept))
PY
cargo install -q --locked --features binary --path "$work/s3s-fs" --root "$work/root"
mkdir -p "$(dirname "$dest")"
cp "$work/root/bin/s3s-fs" "$dest"
echo "built $dest (s3s-fs $version with TCP_NODELAY)"
