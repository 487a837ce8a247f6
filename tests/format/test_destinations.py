"""Where a new store may go: never inside a published store or another writer's
build directory, however the path is spelled; and what concat takes from parts
whose data files are symbolic links."""

import os

import numpy as np
import pytest

from loaderx import _native
from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense, Ragged, RaggedBatch, concat


def make_store(path, start=0):
    with Dense.create(path, np.int32, (2,), codec="zstd", data_shards=2) as w:
        w.append(np.arange(start, start + 20, dtype=np.int32).reshape(10, 2))
    return path


def tree(root):
    return sorted(
        os.path.relpath(os.path.join(top, name), root)
        for top, dirs, files in os.walk(root)
        for name in dirs + files
    )


def creators(dest):
    """Every way of making a store at `dest`, each returning what it made."""
    yield "Dense.create", lambda: Dense.create(dest, np.int8, (), codec="raw")
    yield "Ragged.create", lambda: Ragged.create(dest, np.int8, ndim=1, codec="raw")


@pytest.mark.parametrize(
    "spell",
    [
        lambda root: root / "store" / "inner",
        lambda root: root / "store" / "missing" / "deeper" / "inner",
        lambda root: root / "link" / "inner",
        lambda root: root / "other" / ".." / "store" / "inner",
        lambda root: f"{root / 'store'}/inner/",
    ],
)
def test_no_store_is_created_inside_a_published_store(tmp_path, spell):
    make_store(tmp_path / "store")
    (tmp_path / "other").mkdir()
    os.symlink(tmp_path / "store", tmp_path / "link")
    before = tree(tmp_path)
    dest = spell(tmp_path)
    want = (
        f"cannot create a store inside {os.path.realpath(tmp_path / 'store')}, a published "
        "store, which never changes; choose a path outside it"
    )
    for name, create in creators(dest):
        with pytest.raises(InvalidArgumentError) as e:
            create()
        assert str(e.value).endswith(want), (name, str(e.value))
    with pytest.raises(InvalidArgumentError) as e:
        concat([tmp_path / "store"], dest)
    assert str(e.value).endswith(want)
    assert tree(tmp_path) == before
    with Dense.open(tmp_path / "store") as r:
        r.verify()


def test_no_store_is_created_inside_another_writers_build(tmp_path):
    writer = Dense.create(tmp_path / "pending", np.int8, (), codec="raw")
    (build,) = [n for n in os.listdir(tmp_path) if n.startswith(".pending.tmp-")]
    foreign = tmp_path / ".dead.tmp-1-0000abcd"
    foreign.mkdir()
    for parent in (tmp_path / build, foreign):
        with pytest.raises(InvalidArgumentError, match="an unpublished build directory"):
            Dense.create(parent / "inner", np.int8, (), codec="raw")
        with pytest.raises(InvalidArgumentError, match="an unpublished build directory"):
            concat([make_store(tmp_path / f"part-{parent.name}")], parent / "inner")
    writer.append(np.zeros(3, np.int8))
    writer.close()
    assert not os.listdir(foreign)
    assert np.from_dlpack(Dense.open(tmp_path / "pending")[:]).tolist() == [0, 0, 0]


def test_a_store_beside_or_above_a_store_is_fine(tmp_path):
    make_store(tmp_path / "a" / "store")
    make_store(tmp_path / "a" / "sibling")
    make_store(tmp_path / "a" / "store-2" / "deeper")
    assert sorted(os.listdir(tmp_path / "a")) == ["sibling", "store", "store-2"]


@pytest.mark.parametrize("copy", [False, True])
def test_concat_takes_the_targets_of_linked_data_files(tmp_path, copy):
    a, b = make_store(tmp_path / "a"), make_store(tmp_path / "b", 100)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for k, relative in [(0, True), (1, False)]:
        name = _native.data_file_name(k)
        moved = elsewhere / f"a-{name}"
        os.rename(a / name, moved)
        os.symlink(os.path.relpath(moved, a) if relative else moved, a / name)
    out = concat([a, b], tmp_path / "out", copy=copy)
    assert (out.linked_files, out.copied_files) == ((0, 4) if copy else (4, 0))
    for k in range(4):
        assert not os.path.islink(tmp_path / "out" / _native.data_file_name(k))
    # The parts, links and targets' names gone: the result holds every record.
    for p in (a, elsewhere):
        for name in os.listdir(p):
            os.unlink(p / name)
    with Dense.open(tmp_path / "out") as r:
        r.verify()
        want = np.concatenate([np.arange(20), np.arange(100, 120)]).reshape(20, 2)
        assert np.array_equal(np.from_dlpack(r[:]), want)


def test_concat_of_a_ragged_part_with_links_reads_back(tmp_path):
    recs = [np.arange(n, dtype=np.int16) for n in (3, 0, 5)]
    with Ragged.create(tmp_path / "r", np.int16, ndim=1, codec="raw", data_shards=1) as w:
        w.append(RaggedBatch.from_records(recs))
    name = _native.data_file_name(0)
    os.rename(tmp_path / "r" / name, tmp_path / "payload")
    os.symlink("../payload", tmp_path / "r" / name)
    concat([tmp_path / "r"], tmp_path / "out")
    os.unlink(tmp_path / "payload")
    with Ragged.open(tmp_path / "out") as r:
        got = [np.from_dlpack(t).tolist() for t in r[:].to_tensors()]
    assert got == [x.tolist() for x in recs]
