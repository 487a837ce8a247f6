"""The block cache against a hostile directory: it never deletes what it did not
create (a directory that is not a cache is refused; inside a cache eviction touches
only the cache's own names), never hangs on a FIFO where a file should be, and
survives any change another process makes to its files (truncated, replaced by a
directory, a symlink or a FIFO, unreadable, unwritable) with exact values or a
clear error, never a signal."""

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS

from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Cache, Dense

# Small records (120 bytes) and large ones (64 KiB), with a block size each.
GEOMETRY = {
    "small": {"dtype": np.float32, "shape": (6, 5), "n": 300, "block": 4096},
    "large": {"dtype": np.uint8, "shape": (64, 1024), "n": 24, "block": 1 << 18},
}
MARKER = ".loaderx-cache"
# A hung child is the failure several tests look for: long enough for a loaded
# machine, short against a hang.
DEADLINE_S = 60


def write_store(path, size="small"):
    g = GEOMETRY[size]
    rng = np.random.default_rng(3)
    values = rng.integers(0, 250, size=(g["n"], *g["shape"])).astype(g["dtype"])
    with Dense.create(path, g["dtype"], g["shape"], codec="raw", data_shards=2) as w:
        w.append(values)
    return values


def read_all(url, cache):
    with Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS, cache=cache) as r:
        return np.from_dlpack(r[np.arange(len(r))]).copy()


def cache_files(root):
    """Every file under `root` (relative paths), links included, not followed."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, name)
            out[os.path.relpath(p, root)] = p
    return out


def block_files(root):
    """The cache's block files (numbered files under a data file's directory)."""
    return sorted(
        p
        for rel, p in cache_files(root).items()
        if "data-" in rel and os.path.basename(p).isdigit() and not os.path.islink(p)
    )


def own_name(rel):
    """Whether `rel` is where the cache keeps a block or a small file."""
    parts = rel.split(os.sep)
    return (
        len(parts) == 4
        and re.fullmatch("[0-9a-f]{16}", parts[0]) is not None
        and parts[1].isdigit()
        and re.fullmatch(r"data-\d+\.bin|index\.bin|index\.sum|dict\.bin|attrs\.json", parts[2])
        is not None
        and (parts[3].isdigit() or parts[3] == "whole")
    )


def expected_len(store, block_path, block):
    """The bytes of the block at `block_path`: `block` but for a file's last."""
    size = os.path.getsize(Path(store) / Path(block_path).parent.name)
    return min(block, size - int(Path(block_path).name) * block)


def small_files(root):
    return sorted(p for p in cache_files(root).values() if os.path.basename(p) == "whole")


# A child process: reads every record through the cache (cold, then warm) and
# compares with the local store; with "truncate", it then truncates every block
# file (and every small file) as another process might, and reads again. Prints "ok".
CHILD = r"""
import os, sys
import numpy as np
from loaderx.zrecord import Cache, Dense
url, local, cache_dir, block, mode = sys.argv[1:6]
opts = {"allow_http": "true", "retries": "1", "retry_backoff": "0.01"}
want = np.from_dlpack(Dense.open(local)[np.arange(len(Dense.open(local)))])
cache = Cache(cache_dir, max_bytes=1 << 30, block_bytes=int(block))

def check(r):
    got = np.from_dlpack(r[np.arange(len(r))])
    assert np.array_equal(got, want), "values differ"
    assert np.array_equal(np.from_dlpack(r[[3, 1, 3]]), want[[3, 1, 3]]), "values differ"

with Dense.open(url, storage_options=opts, cache=cache) as r:
    check(r)
    check(r)
    if mode == "truncate":
        blocks = sorted(
            os.path.join(d, f)
            for d, _, fs in os.walk(cache_dir)
            for f in fs
            if "data-" in d and f.isdigit()
        )
        assert blocks
        for k, p in enumerate(blocks):
            os.truncate(p, 0 if k % 2 else os.path.getsize(p) // 2)
        for p in [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs]:
            if os.path.basename(p) == "whole":
                os.truncate(p, 0)
    check(r)
with Dense.open(url, storage_options=opts, cache=cache) as r:
    check(r)
print("ok")
"""


def child(url, local, cache_dir, block, mode="read", unprivileged=False):
    """Runs CHILD; returns the finished process (a hang past DEADLINE_S fails).
    `unprivileged`: file modes apply to it, as root too (which drops the
    capabilities that override them)."""
    argv = [sys.executable, "-c", CHILD, url, str(local), str(cache_dir), str(block), mode]
    if unprivileged and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, file modes apply only without CAP_DAC_OVERRIDE: no setpriv")
        argv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *argv]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child ({mode}) hung for {DEADLINE_S} s")


def assert_ok(proc):
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "ok"


def plant_foreign(root, outside):
    """Files a user keeps in a directory: sources, a large model file in a
    nested directory, symlinks to a file and to a directory outside."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("print('mine')\n")
    (root / "huggingface" / "hub").mkdir(parents=True)
    with open(root / "huggingface" / "hub" / "x.bin", "wb") as f:
        f.write(os.urandom(1 << 20))
    os.symlink(outside / "target.txt", root / "link.txt")
    os.symlink(outside, root / "linkdir")


def snapshot(root):
    """Each file's bytes and each link's target under `root`."""
    out = {}
    for rel, p in cache_files(root).items():
        out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else Path(p).read_bytes()
    return out


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "target.txt").write_text("outside the cache\n")
    return d


def test_a_directory_that_is_not_a_cache_is_refused_before_anything_is_removed(
    tmp_path, range_server, outside
):
    write_store(tmp_path / "s")
    home = tmp_path / "home"
    plant_foreign(home, outside)
    before = snapshot(home)
    outside_before = snapshot(outside)
    # A limit far below what the directory holds: eviction would start at once.
    with pytest.raises(InvalidArgumentError) as e:
        read_all(range_server.url + "/s", Cache(home, max_bytes=1, block_bytes=4096))
    msg = str(e.value)
    assert str(home) in msg and "not a loaderx cache" in msg and MARKER in msg
    assert snapshot(home) == before
    assert snapshot(outside) == outside_before


def test_eviction_touches_only_the_caches_own_files(tmp_path, range_server, outside):
    want = write_store(tmp_path / "s")
    url = range_server.url + "/s"
    root = tmp_path / "cache"
    np.testing.assert_array_equal(read_all(url, Cache(root, block_bytes=4096)), want)
    assert (root / MARKER).is_file()
    with Dense.open(tmp_path / "s") as local:
        store = root / f"{local.header_checksum:016x}" / "4096"
    # Foreign files at every level of the layout, some named like the cache's own.
    plant_foreign(root, outside)
    (store.parent / "README").write_text("x")
    (store / "notes").mkdir()
    (store / "notes" / "1").write_text("a file named like a block")
    (store / "data-000.bin" / "keep.txt").write_text("x")
    (store / "data-000.bin" / "7x").write_text("x")
    os.symlink(outside / "target.txt", store / "data-000.bin" / "9999")
    os.symlink(outside, store / "data-001.bin" / "9998")
    foreign = {
        k: v
        for k, v in snapshot(root).items()
        if k != MARKER and not (own_name(k) and isinstance(v, bytes))
    }
    assert len(foreign) == 10
    outside_before = snapshot(outside)
    # Under a limit of a few blocks, every read evicts.
    cache = Cache(root, max_bytes=10_000, block_bytes=4096)
    for _ in range(3):
        np.testing.assert_array_equal(read_all(url, cache), want)
    after = snapshot(root)
    for k, v in foreign.items():
        assert after.get(k) == v, k
    assert snapshot(outside) == outside_before
    held = sum(os.path.getsize(p) for p in block_files(root))
    assert 0 < held <= 10_000


def test_a_cache_made_before_the_marker_is_adopted(tmp_path, range_server):
    want = write_store(tmp_path / "s")
    url = range_server.url + "/s"
    root = tmp_path / "cache"
    read_all(url, Cache(root, block_bytes=4096))
    os.remove(root / MARKER)
    np.testing.assert_array_equal(read_all(url, Cache(root, block_bytes=4096)), want)
    assert (root / MARKER).is_file()


def test_a_cache_path_that_is_not_a_directory_is_refused(tmp_path, range_server):
    write_store(tmp_path / "s")
    f = tmp_path / "file"
    f.write_text("mine")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (f, fifo):
        with pytest.raises(InvalidArgumentError, match="is not a directory"):
            read_all(range_server.url + "/s", Cache(p))
    assert f.read_text() == "mine" and stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("size", ["small", "large"])
def test_blocks_truncated_while_in_use_never_kill_the_reader(tmp_path, range_server, size):
    write_store(tmp_path / "s", size)
    block = GEOMETRY[size]["block"]
    proc = child(range_server.url + "/s", tmp_path / "s", tmp_path / "cache", block, "truncate")
    assert_ok(proc)
    # A fresh process finds the damaged blocks too short: it refetches them and
    # writes them again whole.
    assert_ok(child(range_server.url + "/s", tmp_path / "s", tmp_path / "cache", block))
    blocks = block_files(tmp_path / "cache")
    assert blocks
    for p in blocks:
        assert os.path.getsize(p) == expected_len(tmp_path / "s", p, block)


def warmed(tmp_path, range_server, size="small"):
    """A store and a cache a child process filled; returns the child's arguments."""
    write_store(tmp_path / "s", size)
    args = (range_server.url + "/s", tmp_path / "s", tmp_path / "cache", GEOMETRY[size]["block"])
    assert_ok(child(*args))
    assert block_files(tmp_path / "cache") and small_files(tmp_path / "cache")
    return args


@pytest.mark.parametrize("where", ["blocks", "small files"])
def test_a_fifo_in_the_cache_never_hangs(tmp_path, range_server, where):
    args = warmed(tmp_path, range_server)
    cache = tmp_path / "cache"
    for p in block_files(cache) if where == "blocks" else small_files(cache):
        os.remove(p)
        os.mkfifo(p)
    range_server.reset_counts()
    assert_ok(child(*args))
    assert any(m == "GET" and p != "/s/header.bin" for m, p, _ in range_server.log())


@pytest.mark.parametrize("size", ["small", "large"])
def test_directories_and_symlinks_where_blocks_should_be(tmp_path, range_server, outside, size):
    args = warmed(tmp_path, range_server, size)
    blocks = block_files(tmp_path / "cache")
    target = outside / "target.txt"
    target.write_bytes(b"\0" * os.path.getsize(blocks[0]))
    for k, p in enumerate(blocks):
        os.remove(p)
        if k % 2:
            os.mkdir(p)
            Path(p, "inside").write_text("x")
        else:
            os.symlink(target, p)
    assert_ok(child(*args))
    # The links were not followed (their target is as it was) and the directories
    # are left alone; the blocks behind links were written again in their place.
    assert target.read_bytes() == b"\0" * os.path.getsize(blocks[0])
    for k, p in enumerate(blocks):
        if k % 2:
            assert Path(p, "inside").read_text() == "x"
        else:
            assert os.path.isfile(p) and not os.path.islink(p)


def test_unreadable_blocks_and_an_unwritable_cache_only_cost_fetches(tmp_path, range_server):
    url, local, cache, block = warmed(tmp_path, range_server)
    blocks = block_files(cache)
    for p in blocks[::2]:
        os.chmod(p, 0)
    dirs = [d for d, _, _ in os.walk(cache)]
    for d in dirs:
        os.chmod(d, 0o555)
    try:
        range_server.reset_counts()
        assert_ok(child(url, local, cache, block, unprivileged=True))
    finally:
        for d in dirs:
            os.chmod(d, 0o755)
    # The blocks it could not read were fetched, and nothing was written.
    assert any("/data-" in p for m, p, _ in range_server.log() if m == "GET")
    assert block_files(cache) == blocks
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0 for p in blocks[::2])
