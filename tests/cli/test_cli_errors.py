"""The command line never prints a traceback: a bad argument is a usage error
(exit 2), a source or store that cannot be used is one line naming it (exit 1)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from loaderx.__main__ import main
from loaderx.zrecord import Dense


def make_store(path):
    with Dense.create(path, np.int16, (2,), codec="raw", data_shards=1) as w:
        w.append(np.arange(6, dtype=np.int16).reshape(3, 2))
    return str(path)


def run(capsys, *argv):
    status = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return status, out.out, out.err


@pytest.mark.parametrize(
    "argv",
    [
        ["info"],
        ["info", "--bogus", "x"],
        ["info", "-o", "no-equals", "x"],
        ["verify"],
        ["convert", "src"],
        ["convert", "src", "dest", "--codec", "lz4"],
        ["convert", "src", "dest", "--data-shards", "0"],
        ["concat", "one"],
        ["bench", "x", "--threads", "many"],
        ["bench", "x", "--batch-size", "-1"],
        ["clean"],
        ["nothing"],
        [],
    ],
)
def test_bad_arguments_are_usage_errors(capsys, argv):
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "")
    assert err.startswith("usage: loaderx") and "error: " in err


def test_a_missing_source_or_store_is_one_line(tmp_path, capsys):
    gone = str(tmp_path / "gone")
    for argv, line in [
        (["convert", gone, str(tmp_path / "out")], f"error: {gone}: no such file or directory"),
        (["convert", "./no/such/dir", str(tmp_path / "out")], "error: ./no/such/dir: no such"),
        (["convert", "x.parquet", str(tmp_path / "out")], "error: x.parquet: no such file"),
        (["info", gone], f"error: {gone}: no such store"),
        (["verify", gone], f"error: {gone}: no such store"),
        (["bench", gone], f"error: {gone}: no such store"),
        (["concat", gone, str(tmp_path / "out")], f"error: {gone}: no such store"),
    ]:
        status, out, err = run(capsys, *argv)
        assert (status, out) == (1, ""), argv
        assert err.startswith(line) and err.count("\n") == 1, err
        assert err.count(gone) <= 1, err  # the path once, not the message's and its own
    assert os.listdir(tmp_path) == []


def test_a_source_that_is_a_fifo_is_refused_at_once(tmp_path, capsys):
    pytest.importorskip("datasets")
    fifo = tmp_path / "data.arrow"
    os.mkfifo(fifo)
    status, out, err = run(capsys, "convert", str(fifo), str(tmp_path / "out"))
    assert (status, out) == (1, "")
    assert err == f"error: {fifo}: is a FIFO; convert reads regular files and directories only\n"


@pytest.mark.parametrize(
    "url, scheme", [("file://", "file://"), ("file:///", "file://"), ("s3://", "s3://")]
)
def test_a_url_that_names_no_store_is_refused_naming_it(capsys, url, scheme):
    # file:// was a store named "file:", looked for at file:/header.bin.
    status, out, err = run(capsys, "info", url)
    assert (status, out) == (1, "")
    assert err == f"error: {url}: names no store: give its location after {scheme}\n"


def test_no_store_is_made_inside_a_store(tmp_path, capsys):
    part = make_store(tmp_path / "part")
    before = sorted(os.listdir(part))
    inside = os.path.join(part, "more")
    status, out, err = run(capsys, "concat", part, inside, "--quiet")
    assert (status, out) == (1, "")
    assert err == (
        f'error: "{inside}": cannot create a store inside {os.path.realpath(part)}, a '
        "published store, which never changes; choose a path outside it\n"
    )
    datasets = pytest.importorskip("datasets")
    src = tmp_path / "src.parquet"
    datasets.Dataset.from_dict({"x": [1, 2]}).to_parquet(src)
    status, out, err = run(capsys, "convert", str(src), os.path.join(part, "conv"), "--quiet")
    assert (status, out) == (1, "")
    assert "a published store, which never changes" in err
    assert sorted(os.listdir(part)) == before


def test_paths_of_undecodable_bytes_are_paths_printed_as_their_bytes(tmp_path):
    # argparse gives such bytes as surrogates, which made `info` raise
    # UnicodeEncodeError; printing one would fail on a strict stdout.
    odd = os.fsencode(tmp_path) + b"/\xff"
    make_store(os.fsdecode(odd))
    env = {**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}

    def cli(*argv):
        done = subprocess.run(
            [sys.executable, "-m", "loaderx", *argv], capture_output=True, env=env, timeout=120
        )
        assert b"Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout, done.stderr

    status, out, err = cli("verify", "--quiet", odd, odd + b"-gone")
    assert status == 1 and out.startswith(odd + b": 3 records intact")
    assert err == b"error: " + odd + b"-gone: no such store\n"
    status, out, err = cli("info", odd + b"-gone")
    assert (status, out, err) == (1, b"", b"error: " + odd + b"-gone: no such store\n")
    status, out, err = cli("info", odd)
    assert status == 0 and out.startswith(odd + b": Dense int16"), out


def test_output_closed_early_ends_quietly(tmp_path):
    # `loaderx info ROOT | head` printed a BrokenPipeError traceback.
    store = make_store(tmp_path / "s")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderx", "info", *[store] * 5000],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(store.encode() + b": Dense int16")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1
    assert err == b""
