"""`create` checks the whole destination before it creates anything: a refused
path leaves the filesystem as it was."""

import os

import numpy as np
import pytest

from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense, Ragged


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_bytes(b"not a directory")
    return tmp_path


def tree(root):
    return sorted(
        os.path.relpath(os.path.join(d, n), root)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
    )


REFUSED = {
    "newx/.": ", not '.' or '..'",
    "newy/..": ", not '.' or '..'",
    "a/b/./": ", not '.' or '..'",
    ".": ", not '.' or '..'",
    "..": ", not '.' or '..'",
    "": "; this one is empty",
    "/": "; this one is the root directory",
    "//": "; this one is the root directory",
}


@pytest.mark.parametrize("path", sorted(REFUSED))
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_paths_without_a_final_name_are_refused_before_anything_is_created(in_tmp, path, kind):
    before = tree(in_tmp)
    with pytest.raises(InvalidArgumentError) as e:
        if kind == "dense":
            Dense.create(path, np.int32, (2,), codec="raw")
        else:
            Ragged.create(path, np.int32, ndim=1, codec="raw")
    assert str(e.value) == (f'"{path}": a store path must end in a directory name' + REFUSED[path])
    assert isinstance(e.value, ValueError)
    assert tree(in_tmp) == before


@pytest.mark.parametrize("path", ["file/s", "file/deeper/s", "./file/s"])
def test_a_path_under_a_regular_file_is_refused_before_anything_is_created(in_tmp, path):
    before = tree(in_tmp)
    with pytest.raises(InvalidArgumentError) as e:
        Dense.create(path, np.int32, (2,), codec="raw")
    under = "file" if path != "./file/s" else "./file"
    assert str(e.value) == f'"{path}": cannot create a store under "{under}": not a directory'
    assert tree(in_tmp) == before


def test_a_trailing_slash_names_the_same_store(in_tmp):
    with Dense.create("dir/s/", np.int32, (2,), codec="raw") as w:
        w.append(np.ones((3, 2), np.int32))
    assert tree(in_tmp / "dir") == ["s"] + [f"s/{n}" for n in sorted(os.listdir("dir/s"))]
    with Dense.open("dir/s") as ds:
        assert np.from_dlpack(ds[:]).tolist() == [[1, 1]] * 3


def test_an_existing_destination_is_refused_before_anything_is_created(in_tmp):
    os.mkdir("taken")
    before = tree(in_tmp)
    for path in ("taken", "taken/", "file"):
        with pytest.raises(FileExistsError, match="already exists"):
            Dense.create(path, np.int32, (2,), codec="raw")
    assert tree(in_tmp) == before
