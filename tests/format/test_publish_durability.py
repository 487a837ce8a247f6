"""Publishing is all or nothing, and a failure says which of the two happened.

Faults come from tests/support/fs_faults.c, preloaded into a child process: a directory
fsync that fails with EIO before or after the rename that publishes."""

import json
import os
import textwrap

import fs_faults
import numpy as np
import pytest

from loaderx.zrecord import Dense

CLOSE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from loaderx.zrecord import Dense

    w = Dense.create(sys.argv[1], np.int64, (4,), codec=sys.argv[2])
    w.append(np.arange(40, dtype=np.int64).reshape(10, 4))
    out = {"raised": None}
    try:
        w.close()
    except Exception as e:
        out = {
            "raised": type(e).__name__,
            "bases": [c.__name__ for c in type(e).__mro__],
            "errno": getattr(e, "errno", None),
            "message": str(e),
        }
    w.close()  # a second close does nothing, whatever the first one raised
    out["closed"] = w.closed
    print(json.dumps(out))
    """
)

DATA = np.arange(40, dtype=np.int64).reshape(10, 4)


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return fs_faults.build(tmp_path_factory)


def reference_files(tmp_path_factory, codec):
    ref = tmp_path_factory.mktemp("ref") / "s"
    with Dense.create(ref, np.int64, (4,), codec=codec) as w:
        w.append(DATA)
    return sorted(os.listdir(ref))


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_fsync_failing_after_the_rename_reports_a_published_store(
    faults, tmp_path, tmp_path_factory, codec
):
    dest = tmp_path / "s"
    p = fs_faults.run(faults, "fsync_dir_after_rename", CLOSE, str(dest), codec)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["raised"] == "PublishedNotDurableError"
    assert out["bases"][1:4] == ["StorageError", "LoaderxError", "OSError"]
    assert out["errno"] == 5  # EIO, as the filesystem said
    assert f"was published at {dest}" in out["message"]
    assert "may not be durable" in out["message"]
    assert out["closed"] is True
    # The store is there, whole, and nothing else is: no build directory left.
    assert os.listdir(tmp_path) == ["s"]
    assert sorted(os.listdir(dest)) == reference_files(tmp_path_factory, codec)
    with Dense.open(dest) as ds:
        ds.verify()
        assert np.array_equal(np.from_dlpack(ds[:]), DATA)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_fsync_failing_before_the_rename_publishes_nothing(faults, tmp_path, codec):
    dest = tmp_path / "s"
    p = fs_faults.run(faults, "fsync_dir_before_rename", CLOSE, str(dest), codec)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["raised"] == "StorageError"
    assert out["errno"] == 5
    assert "Input/output error" in out["message"]
    assert out["closed"] is True
    assert os.listdir(tmp_path) == []  # neither the store nor its build directory


CONVERT = textwrap.dedent(
    """
    import json, sys
    from datasets import Dataset
    from loaderx.converter import convert

    ds = Dataset.from_dict({"x": [1, 2, 3]})
    try:
        convert(ds, sys.argv[1], codec="raw", progress=False)
        out = {"raised": None}
    except Exception as e:
        out = {"raised": type(e).__name__, "errno": getattr(e, "errno", None),
               "message": str(e)}
    print(json.dumps(out))
    """
)


def test_converter_reports_a_published_root_after_a_failed_fsync(faults, tmp_path):
    pytest.importorskip("datasets")
    dest = tmp_path / "out"
    # Rename 1 publishes column x inside the build root, rename 2 the root.
    p = fs_faults.run(faults, "fsync_dir_after_rename", CONVERT, str(dest), at=2)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["raised"] == "PublishedNotDurableError"
    assert out["errno"] == 5
    assert f"was published at {dest}" in out["message"]
    assert os.listdir(tmp_path) == ["out"]
    with Dense.open(dest / "x") as x:
        assert np.from_dlpack(x[:]).tolist() == [1, 2, 3]


def test_converter_publishes_nothing_when_a_column_is_not_durable(faults, tmp_path):
    pytest.importorskip("datasets")
    dest = tmp_path / "out"
    p = fs_faults.run(faults, "fsync_dir_after_rename", CONVERT, str(dest), at=1)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["raised"] == "StorageError"
    assert out["errno"] == 5
    assert f"{dest}: nothing was published" in out["message"]
    assert os.listdir(tmp_path) == []
