"""convert never stores a value other than the one given, a store that would not
open or list, or waits on a file that is not a regular file."""

import os
import warnings

import numpy as np
import pytest
from fifo_unblock import Unblock

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

from datasets import (  # noqa: E402
    ClassLabel,
    Dataset,
    DatasetDict,
    Features,
    Image,
    Sequence,
    Value,
)

from loaderx.converter import convert, load_source  # noqa: E402
from loaderx.errors import InvalidArgumentError, StoreNotFoundError  # noqa: E402
from loaderx.zrecord import Dense, Ragged  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::loaderx.converter.CodecAdviceWarning")


def with_features(table, features):
    """A Dataset over `table` as it is: datasets' own checks of the values (which
    from_dict runs) do not apply to a table read from Parquet or Arrow."""
    return Dataset(table, info=datasets.DatasetInfo(features=Features(features)))


# ---- ClassLabel values -------------------------------------------------------------


@pytest.mark.parametrize("bad, row", [(3, 2), (-2, 1), (2**40, 0)])
def test_a_class_label_outside_its_names_names_the_row(tmp_path, bad, row):
    values = [0, 1, 2, 1]
    values[row] = bad
    ds = with_features(
        pa.table({"y": pa.array(values, pa.int64())}), {"y": ClassLabel(names=["a", "b", "c"])}
    )
    with pytest.raises(InvalidArgumentError) as e:
        convert(ds, tmp_path / "c", codec="raw", progress=False)
    assert str(e.value) == (
        f"column 'y': row {row} holds {bad}, which is not a class of its ClassLabel (0..2 "
        "for its 3 names, or -1 for no label); fix the value, or declare the names it "
        "stands for"
    )
    assert os.listdir(tmp_path) == []


def test_class_labels_inside_lists_are_checked_and_minus_one_is_no_label(tmp_path):
    features = {"tags": Sequence(ClassLabel(names=["a", "b"])), "y": ClassLabel(names=["a", "b"])}
    good = pa.table({"tags": [[0, 1], [], [1, -1]], "y": [1, -1, 0]})
    convert(with_features(good, features), tmp_path / "ok", codec="raw", progress=False)
    with Ragged.open(tmp_path / "ok" / "tags") as s:
        assert [np.from_dlpack(t).tolist() for t in s[:].to_tensors()] == [[0, 1], [], [1, -1]]
    with Dense.open(tmp_path / "ok" / "y") as s:
        assert np.from_dlpack(s[:]).tolist() == [1, -1, 0]
    bad = pa.table({"tags": [[0, 1], [], [1, 2]], "y": [1, 1, 0]})
    with pytest.raises(InvalidArgumentError, match=r"^column 'tags': row 2 holds 2, which is not"):
        convert(with_features(bad, features), tmp_path / "bad", codec="raw", progress=False)
    assert os.listdir(tmp_path) == ["ok"]


# ---- narrowing with dtypes= ----------------------------------------------------------


@pytest.mark.parametrize(
    "values, source, target, row, held, became",
    [
        ([1.0, 2.5, 1e10], "float64", "float16", 2, "10000000000.0", "inf"),
        ([-1e300, 0.0], "float64", "float32", 0, "-1e+300", "-inf"),
        ([1.0, 70000.0], "float32", "float16", 1, "70000.0", "inf"),
    ],
)
def test_a_narrowing_that_overflows_names_the_row_without_a_warning(
    tmp_path, values, source, target, row, held, became
):
    ds = Dataset(pa.table({"x": pa.array(np.array(values, dtype=source))}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's overflow warning included
        with pytest.raises(InvalidArgumentError) as e:
            convert(ds, tmp_path / "c", codec="raw", dtypes={"x": target}, progress=False)
    assert str(e.value) == (
        f"column 'x': row {row} holds {held}, which is beyond the range of {target} (it "
        f"would become {became}); ask dtypes= for a wider type"
    )
    assert os.listdir(tmp_path) == []


def test_a_narrowing_keeps_nan_and_infinities_and_rounds_the_rest(tmp_path):
    x = np.array([0.1, np.nan, np.inf, -np.inf, 65504.0, 1e-30])
    ds = Dataset(pa.table({"x": pa.array(x), "seq": pa.array([[0.5, 1e-9]] * 6)}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        convert(ds, tmp_path / "c", codec="raw", dtypes={"x": "float16", "seq": "float16"})
    with Dense.open(tmp_path / "c" / "x") as s:
        got = np.from_dlpack(s[:])
    assert got.dtype == np.float16
    assert np.array_equal(got, x.astype(np.float16), equal_nan=True)
    assert got[5] == 0.0  # below float16's smallest: rounded, which narrowing asks for
    seq = np.array([[0.5, 1e-9]] * 6, dtype=np.float16)
    with pytest.raises(
        InvalidArgumentError, match=r"^column 'seq': row 3 holds 10000000000.0, which is beyond"
    ):
        rows = [[0.5, 1.0]] * 3 + [[1e10]] + [[0.0]] * 2
        convert(
            Dataset(pa.table({"seq": pa.array(rows)})),
            tmp_path / "d",
            codec="raw",
            dtypes={"seq": "float16"},
        )
    with Ragged.open(tmp_path / "c" / "seq") as s:
        assert np.array_equal(np.from_dlpack(s[:].values), seq.reshape(-1))
    assert os.listdir(tmp_path) == ["c"]


# ---- names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, why",
    [
        (".hidden", "a name starting with '.' is hidden, and is how build directories are named"),
        (".x.tmp-1-0000abcd", "a name starting with '.' is hidden"),
        ("a\\b", "it holds a path separator"),
        ("line\nbreak", "it holds a control character"),
        ("tab\t", "it holds a control character"),
        ("é" * 128, "it takes 256 bytes of UTF-8, more than a directory name's 255"),
    ],
)
def test_names_that_would_hide_or_break_a_store_are_refused(tmp_path, name, why):
    with pytest.raises(InvalidArgumentError) as e:
        convert(Dataset.from_dict({"a": [1], name: [2]}), tmp_path / "c", codec="raw")
    assert f"  - column {name!r} cannot name a directory of the output: {why}" in str(e.value), str(
        e.value
    )
    with pytest.raises(InvalidArgumentError, match="cannot name a directory of the output: "):
        convert(DatasetDict({name: Dataset.from_dict({"a": [1]})}), tmp_path / "d", codec="raw")
    assert os.listdir(tmp_path) == []
    # One byte shorter, or the dot elsewhere, is an ordinary name.
    ok = "é" * 127 + "e"
    convert(Dataset.from_dict({ok: [1], "a.b": [2]}), tmp_path / "e", codec="raw")
    assert sorted(os.listdir(tmp_path / "e")) == sorted([ok, "a.b"])


# ---- files that are not regular files ---------------------------------------------


def file_rows(paths):
    storage = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    files = pa.array([{"bytes": None, "path": p} for p in paths], storage)
    table = pa.table({"img": files, "y": range(len(paths))})
    return with_features(table, {"img": Image(), "y": Value("int64")})


def test_an_image_path_that_is_a_fifo_is_refused_at_once(tmp_path):
    (tmp_path / "ok.png").write_bytes(b"png bytes")
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    ds = file_rows([str(tmp_path / "ok.png"), str(fifo)])
    with Unblock(fifo, after=10) as u, pytest.raises(InvalidArgumentError) as e:
        convert(ds, tmp_path / "out", codec="raw", progress=False)
    assert not u.unblocked and u.elapsed < 5
    assert str(e.value).startswith(
        f"column 'img': row 1 refers to the file {str(fifo)!r}, which cannot be read (it is "
        "a FIFO, not a regular file); embed the files first"
    )
    assert sorted(os.listdir(tmp_path)) == ["fifo.png", "ok.png"]


def test_an_image_path_that_is_a_device_or_a_directory_is_refused(tmp_path):
    # /dev/null was stored as an empty file; /dev/zero would be read forever.
    for path, kind in [("/dev/null", "a character device"), (str(tmp_path), "a directory")]:
        with pytest.raises(InvalidArgumentError, match=f"cannot be read \\(it is {kind}, not a"):
            convert(file_rows([path]), tmp_path / "out", codec="raw", progress=False)
        assert not (tmp_path / "out").exists()
    # A file larger than one record holds is refused before it is read (sparse here).
    huge = tmp_path / "huge.png"
    with open(huge, "wb") as f:
        f.truncate(2**31)
    with pytest.raises(InvalidArgumentError) as e:
        convert(file_rows([str(huge)]), tmp_path / "out", codec="raw", progress=False)
    assert "cannot be read (it holds 2,147,483,648 bytes, more than 2,147,483,647)" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["huge.png"]


def test_a_source_that_is_a_fifo_or_holds_one_is_refused_at_once(tmp_path):
    fifo = tmp_path / "data.parquet"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgumentError, match=r"data.parquet: is a FIFO; convert reads"):
        load_source(fifo)
    saved = tmp_path / "saved"
    DatasetDict(train=Dataset.from_dict({"x": [1, 2]})).save_to_disk(saved)
    for victim in (saved / "dataset_dict.json", saved / "train" / "state.json"):
        victim.unlink()
        os.mkfifo(victim)
        with Unblock(victim) as u, pytest.raises(InvalidArgumentError) as e:
            load_source(saved)
        assert not u.unblocked and u.elapsed < 5
        assert str(e.value) == (
            f"{victim}: is a FIFO; convert reads regular files and directories only"
        )
        victim.unlink()
        victim.write_text("{}")


def test_a_missing_source_path_is_not_taken_for_a_hub_id(tmp_path):
    for missing in (str(tmp_path / "nothing"), "./nothing", "../no/such/dir", "x.parquet"):
        with pytest.raises(StoreNotFoundError) as e:
            load_source(missing)
        assert str(e.value).startswith(f"[Errno 2] {missing}: no such file or directory")
