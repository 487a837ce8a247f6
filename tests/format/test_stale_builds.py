"""A build directory never passes for a store, and a dead writer's can be removed.

A writer builds its store in a hidden sibling directory and holds a lock inside
it until it publishes or discards it. `clean` removes the build directories whose
lock nobody holds; opening one, or anything inside one, is refused."""

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import fs_faults
import numpy as np
import pytest

from loaderx import _native
from loaderx.errors import StorageError, StoreNotFoundError
from loaderx.zrecord import Dense, Ragged, RaggedBatch, ZrecordError, clean

BUILD_DIR = re.compile(r"^\.s\.tmp-\d+-[0-9a-f]{8}$")
UNPUBLISHED = "unpublished build directory"

APPEND_FOREVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from loaderx.zrecord import Dense
    w = Dense.create(sys.argv[1], np.uint8, (1 << 16,), codec="raw")
    data = np.random.default_rng(0).integers(0, 255, (256, 1 << 16), dtype=np.uint8)
    w.append(data[:8])
    print("appended", flush=True)
    while True:
        w.append(data)
    """
)

WRITE_AND_CLOSE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from loaderx.zrecord import Dense
    with Dense.create(sys.argv[1], np.int64, (3,), codec=sys.argv[2]) as w:
        w.append(np.arange(30, dtype=np.int64).reshape(10, 3))
    """
)


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return fs_faults.build(tmp_path_factory)


def wait_stopped(p, seconds=60.0):
    """Waits until child `p` has stopped itself (its state in /proc is T)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert p.poll() is None, p.stderr.read()
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.01)
    raise AssertionError("the child never reached the rename")


def build_dirs(parent):
    return sorted(n for n in os.listdir(parent) if BUILD_DIR.match(n))


def test_writer_killed_mid_append_leaves_a_build_dir_that_is_refused_and_cleaned(tmp_path):
    p = subprocess.Popen(
        [sys.executable, "-c", APPEND_FOREVER, str(tmp_path / "s")], stdout=subprocess.PIPE
    )
    assert p.stdout.readline().strip() == b"appended"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    [left] = build_dirs(tmp_path)
    assert os.listdir(tmp_path) == [left]
    with pytest.raises(ZrecordError, match=f"{re.escape(left)}: .*{UNPUBLISHED}"):
        Dense.open(tmp_path / left)
    assert clean(tmp_path) == [str(tmp_path / left)]
    assert os.listdir(tmp_path) == []
    assert clean(tmp_path) == []


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_writer_killed_between_header_and_rename_leaves_nothing_that_opens(faults, tmp_path, codec):
    # The build directory is complete here: header written and synced. Only
    # its name says it was never published.
    p = fs_faults.run(faults, "kill_at_rename", WRITE_AND_CLOSE, str(tmp_path / "s"), codec)
    assert p.returncode == -signal.SIGKILL
    [left] = build_dirs(tmp_path)
    assert "header.bin" in os.listdir(tmp_path / left)
    for opener in (Dense.open, Ragged.open, _native.Store.open):
        with pytest.raises(ZrecordError, match=UNPUBLISHED):
            opener(tmp_path / left)
    # Refused however the path is spelt: relative, with a trailing slash, or
    # through a symbolic link.
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ZrecordError, match=UNPUBLISHED):
            Dense.open(left)
        with pytest.raises(ZrecordError, match=UNPUBLISHED):
            Dense.open(left + "/")
    finally:
        os.chdir(cwd)
    os.symlink(tmp_path / left, tmp_path.parent / f"{tmp_path.name}-link")
    try:
        with pytest.raises(ZrecordError, match=UNPUBLISHED):
            Dense.open(tmp_path.parent / f"{tmp_path.name}-link")
    finally:
        os.remove(tmp_path.parent / f"{tmp_path.name}-link")
    assert clean(tmp_path) == [str(tmp_path / left)]
    assert os.listdir(tmp_path) == []


def test_a_copy_of_a_store_under_a_build_name_is_refused(tmp_path):
    with Dense.create(tmp_path / "s", np.int32, (2,), codec="raw") as w:
        w.append(np.zeros((3, 2), np.int32))
    shutil.copytree(tmp_path / "s", tmp_path / ".s.tmp-1-0000abcd")
    with pytest.raises(ZrecordError, match=UNPUBLISHED):
        Dense.open(tmp_path / ".s.tmp-1-0000abcd")
    # Names that only look alike are ordinary stores.
    for name in (".s.tmp", ".s.tmp-1-abcd", "s.tmp-1-0000abcd", ".s.tmp-x-0000abcd"):
        shutil.copytree(tmp_path / "s", tmp_path / name)
        with Dense.open(tmp_path / name) as ds:
            assert len(ds) == 3


def test_clean_never_removes_a_live_writers_build_dir(tmp_path):
    w = Dense.create(tmp_path / "s", np.int64, (2,), codec="zstd")
    w.append(np.ones((5, 2), np.int64))
    [live] = build_dirs(tmp_path)
    assert clean(tmp_path) == []
    assert build_dirs(tmp_path) == [live]
    w.close()
    assert os.listdir(tmp_path) == ["s"]
    assert clean(tmp_path) == []
    with Dense.open(tmp_path / "s") as ds:
        assert np.from_dlpack(ds[:]).tolist() == [[1, 1]] * 5


def test_clean_waits_for_a_live_writer_in_another_process(faults, tmp_path):
    # Stopped at the rename: alive, finished, and holding its lock.
    p = fs_faults.start(faults, "stop_at_rename", WRITE_AND_CLOSE, str(tmp_path / "s"), "raw")
    try:
        wait_stopped(p)
        [live] = build_dirs(tmp_path)
        assert clean(tmp_path) == []
        assert build_dirs(tmp_path) == [live]
    finally:
        p.kill()
        p.wait()
    assert clean(tmp_path) == [str(tmp_path / live)]
    assert os.listdir(tmp_path) == []


def test_an_empty_build_dir_is_cleaned_and_a_foreign_one_is_kept(tmp_path):
    # A writer killed before its lock existed leaves an empty directory; one
    # that holds files but no lock was not made by this version, so it stays.
    os.mkdir(tmp_path / ".a.tmp-7-00000001")
    os.mkdir(tmp_path / ".b.tmp-7-00000002")
    (tmp_path / ".b.tmp-7-00000002" / "header.bin").write_bytes(b"x")
    os.mkdir(tmp_path / "c")
    (tmp_path / ".d.tmp-7-00000003").write_bytes(b"a file, not a build directory")
    os.symlink(tmp_path / "c", tmp_path / ".e.tmp-7-00000004")
    assert clean(tmp_path) == [str(tmp_path / ".a.tmp-7-00000001")]
    assert sorted(os.listdir(tmp_path)) == [
        ".b.tmp-7-00000002",
        ".d.tmp-7-00000003",
        ".e.tmp-7-00000004",
        "c",
    ]


def test_clean_argument_errors(tmp_path):
    with pytest.raises(StoreNotFoundError, match="missing"):
        clean(tmp_path / "missing")
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(StorageError, match="Not a directory") as e:
        clean(tmp_path / "f")
    assert e.value.errno == errno.ENOTDIR
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        clean(3)


CONVERT = textwrap.dedent(
    """
    import sys
    from datasets import Dataset, DatasetDict
    from loaderx.converter import convert

    d = Dataset.from_dict({"x": [1, 2, 3], "y": [[1], [2, 3], []]})
    convert(DatasetDict({"train": d}), sys.argv[1], codec="raw", progress=False)
    """
)


@pytest.mark.parametrize("fault", ["kill_at_rename", "stop_at_rename"])
def test_converter_build_root_is_refused_and_cleaned_only_when_dead(faults, tmp_path, fault):
    pytest.importorskip("datasets")
    out = tmp_path / "out"
    # Renames 1 and 2 publish the two columns inside the build root; 3 is the root.
    p = fs_faults.start(faults, fault, CONVERT, str(out), at=3)
    try:
        if fault == "stop_at_rename":
            wait_stopped(p)
            assert clean(tmp_path) == []
            [root] = os.listdir(tmp_path)
            assert re.match(r"^\.out\.tmp-\d+-[0-9a-f]{8}$", root)
        else:
            p.wait()
    finally:
        p.kill()
        p.wait()
    [root] = os.listdir(tmp_path)
    inside = tmp_path / root / "train"
    assert sorted(os.listdir(inside)) == ["x", "y"]
    with pytest.raises(ZrecordError, match=UNPUBLISHED):
        Dense.open(inside / "x")
    with pytest.raises(ZrecordError, match=UNPUBLISHED):
        Ragged.open(inside / "y")
    assert clean(tmp_path) == [str(tmp_path / root)]
    assert os.listdir(tmp_path) == []


def test_published_stores_hold_only_their_own_files(tmp_path):
    with Dense.create(tmp_path / "d", np.int32, (), codec="raw") as w:
        w.append(np.arange(3, dtype=np.int32))
    with Ragged.create(tmp_path / "r", np.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records([np.arange(2, dtype=np.int32)]))
    for store in ("d", "r"):
        names = os.listdir(tmp_path / store)
        assert not [n for n in names if "lock" in n], names


CLI = [sys.executable, "-m", "loaderx", "clean"]


def test_cli_clean(tmp_path):
    os.mkdir(tmp_path / "a")
    os.mkdir(tmp_path / "a" / ".s.tmp-9-0000000a")
    os.mkdir(tmp_path / "b")
    out = subprocess.run(
        [*CLI, str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"removed {tmp_path / 'a' / '.s.tmp-9-0000000a'}\n"
    assert os.listdir(tmp_path / "a") == []
    bad = subprocess.run(
        [*CLI, str(tmp_path / "missing"), str(tmp_path / "b")], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert f"{tmp_path / 'missing'}" in bad.stderr and bad.stdout == ""
