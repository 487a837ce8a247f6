"""python -m loaderx info / verify."""

import subprocess
import sys

import numpy as np

from loaderx.zrecord import Dense


def run(*args):
    return subprocess.run([sys.executable, "-m", "loaderx", *args], capture_output=True, text=True)


def test_info_and_verify(tmp_path):
    with Dense.create(tmp_path / "s", np.float32, (3,), codec="zstd", data_shards=2) as w:
        w.append(np.ones((5, 3), np.float32))
    out = run("info", str(tmp_path / "s"))
    assert out.returncode == 0
    assert "Dense float32 item_shape=(3,), 5 records, codec=zstd, data_shards=2" in out.stdout
    assert run("verify", str(tmp_path / "s")).stdout.startswith(
        f"{tmp_path / 's'}: 5 records intact"
    )
    data = tmp_path / "s" / "data-000.bin"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 1
    data.write_bytes(bytes(raw))
    bad = run("verify", str(tmp_path / "s"))
    assert bad.returncode == 1 and "checksum mismatch" in bad.stderr
    missing = run("info", str(tmp_path / "missing"))
    assert missing.returncode == 1 and "no such store" in missing.stderr
