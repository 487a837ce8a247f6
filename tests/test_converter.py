"""loaderx.converter: Hugging Face datasets into Zrecord stores."""

import os

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

from datasets import (  # noqa: E402
    Array2D,
    Dataset,
    DatasetDict,
    Features,
    Image,
    Sequence,
    Value,
)

from loaderx.converter import convert, huggingface  # noqa: E402
from loaderx.zrecord import Dense, Ragged  # noqa: E402


def records(store):
    return [np.from_dlpack(t).tolist() for t in store[:].to_tensors()]


def test_the_spec_example(tmp_path):
    dataset = Dataset.from_dict(
        {"tokens": [[1, 2], [3], [4, 5, 6]]},
        features=Features({"tokens": Sequence(Value("int32"))}),
    )
    out = convert(dataset, tmp_path / "tokens", codec="zstd", progress=False)
    assert out == str(tmp_path / "tokens")
    with Ragged.open(tmp_path / "tokens" / "tokens") as rs:
        assert rs.dtype == np.int32 and rs.ndim == 1 and rs.codec == "zstd"
        assert records(rs) == [[1, 2], [3], [4, 5, 6]]
    assert os.listdir(tmp_path) == ["tokens"]  # no temporary left behind


def split(n, seed):
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(0, 50_000, rng.integers(0, 9)).tolist() for _ in range(n)]
    vols = []
    for _ in range(n):
        shape = [int(rng.integers(0, 3)), int(rng.integers(1, 4))]
        vols.append({"values": rng.random(shape[0] * shape[1]).tolist(), "shape": shape})
    return {
        "label": rng.integers(0, 10, n).tolist(),
        "flag": (rng.random(n) > 0.5).tolist(),
        "image": rng.integers(0, 255, (n, 2, 3)).tolist(),
        "emb": rng.random((n, 4)).astype(np.float32).tolist(),
        "tokens": tokens,
        "raw": [bytes(rng.integers(0, 255, rng.integers(0, 6)).astype(np.uint8)) for _ in range(n)],
        "vol": vols,
    }


FEATURES = Features(
    {
        "label": Value("int64"),
        "flag": Value("bool"),
        "image": Array2D((2, 3), "uint8"),
        "emb": Sequence(Value("float32"), length=4),
        "tokens": Sequence(Value("int32")),
        "raw": Value("binary"),
        "vol": {"values": Sequence(Value("float64")), "shape": Sequence(Value("uint64"), length=2)},
    }
)


def check_split(root, data):
    n = len(data["label"])
    with Dense.open(root / "label") as s:
        assert (s.dtype, s.item_shape) == (np.int64, ())
        assert np.from_dlpack(s[:]).tolist() == data["label"]
    with Dense.open(root / "flag") as s:
        assert s.dtype == np.bool_ and np.from_dlpack(s[:]).tolist() == data["flag"]
    with Dense.open(root / "image") as s:
        assert (s.dtype, s.item_shape) == (np.uint8, (2, 3))
        assert np.from_dlpack(s[:]).tolist() == data["image"]
    with Dense.open(root / "emb") as s:
        assert (s.dtype, s.item_shape) == (np.float32, (4,))
        assert np.array_equal(np.from_dlpack(s[:]), np.array(data["emb"], np.float32))
    with Ragged.open(root / "tokens") as s:
        assert s.dtype == np.int32 and records(s) == data["tokens"]
    with Ragged.open(root / "raw") as s:
        assert s.dtype == np.uint8 and [bytes(r) for r in records(s)] == data["raw"]
    with Ragged.open(root / "vol") as s:
        assert s.dtype == np.float64 and s.ndim == 2
        want = [np.reshape(v["values"], v["shape"]).tolist() for v in data["vol"]]
        assert records(s) == want
    assert sorted(os.listdir(root)) == sorted(FEATURES)
    for name in FEATURES:
        store = (Dense if name in ("label", "flag", "image", "emb") else Ragged).open(root / name)
        assert len(store) == n


def test_every_column_kind_of_a_dataset_dict(tmp_path):
    train, test = split(5000, 1), split(7, 2)  # 5000 rows span two Arrow batches
    dd = DatasetDict(
        train=Dataset.from_dict(train, features=FEATURES),
        test=Dataset.from_dict(test, features=FEATURES),
    )
    convert(dd, tmp_path / "out", codec="raw", data_shards=2, progress=False)
    assert sorted(os.listdir(tmp_path / "out")) == ["test", "train"]
    check_split(tmp_path / "out" / "train", train)
    check_split(tmp_path / "out" / "test", test)


def test_row_order_follows_the_dataset_after_shuffle_and_select(tmp_path):
    ds = Dataset.from_dict({"x": list(range(100)), "t": [[i] * (i % 3) for i in range(100)]})
    view = ds.shuffle(seed=3).select(range(10, 60))
    convert(view, tmp_path / "v", codec="zstd", progress=False)
    with Dense.open(tmp_path / "v" / "x") as s:
        xs = np.from_dlpack(s[:]).tolist()
    assert xs == view["x"]
    with Ragged.open(tmp_path / "v" / "t") as s:
        assert records(s) == view["t"]


def _image_column():
    # Built from Arrow with the feature declared, so that no image is encoded
    # (encoding needs Pillow, which the test environment does not install).
    storage = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"ok": [0], "img": pa.array([{"bytes": b"\x89PNG", "path": None}], storage)})
    features = Features({"ok": Value("int64"), "img": Image()})
    return Dataset(table, info=datasets.DatasetInfo(features=features))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Dataset.from_dict({"ok": [1, 2], "s": ["a", "b"]}), "'s': string values"),
        (lambda: Dataset.from_dict({"ok": [1, 2], "t": [[1], None]}), "'t' holds 1 null value"),
        (
            lambda: Dataset.from_dict({"ok": [1, 2], "t": [[[1], [2, 3]], [[4]]]}),
            "'t': .* nests dynamic lists",
        ),
        (_image_column, "'img' has feature type Image; decode it to arrays"),
    ],
)
def test_unstorable_columns_fail_before_anything_is_published(tmp_path, make, message):
    with pytest.raises(ValueError, match=f"column {message}"):
        convert(make(), tmp_path / "out", codec="raw", progress=False)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["..", "a/b", "/abs/evil", "."])
def test_names_that_are_not_one_directory_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="cannot name a directory of the output"):
        convert(Dataset.from_dict({"a": [1], name: [2]}), tmp_path / "c", codec="raw")
    with pytest.raises(ValueError, match=f"split {name!r} cannot name a directory"):
        convert(DatasetDict({name: Dataset.from_dict({"a": [1]})}), tmp_path / "d", codec="raw")
    assert os.listdir(tmp_path) == []


def test_argument_errors(tmp_path):
    ds = Dataset.from_dict({"x": [1, 2, 3]})
    with pytest.raises(ValueError, match="zstd_dict needs a dictionary per column"):
        convert(ds, tmp_path / "a", codec="zstd_dict", progress=False)
    with pytest.raises(ValueError, match="codec must be 'raw' or 'zstd'"):
        convert(ds, tmp_path / "a", codec="lz4", progress=False)
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        convert(ds, tmp_path / "exists", codec="raw", progress=False)
    with pytest.raises(TypeError, match="not an IterableDataset: materialize it first"):
        convert(ds.to_iterable_dataset(), tmp_path / "a", codec="raw", progress=False)
    with pytest.raises(TypeError, match="got dict"):
        convert({"train": {"x": [1]}}, tmp_path / "a", codec="raw", progress=False)
    with pytest.raises(ValueError, match="has no rows"):
        convert(ds.select([]), tmp_path / "a", codec="raw", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["exists"]


def test_progress_goes_to_stderr(tmp_path, capsys):
    convert(Dataset.from_dict({"x": [1, 2]}), tmp_path / "p", codec="raw")
    err = capsys.readouterr().err
    assert f"{tmp_path / 'p'}: 2 / 2 rows" in err and f"published {tmp_path / 'p'}" in err
    assert ".tmp-" not in err  # the temporary build directory is not shown


def test_huggingface_resolves_the_revision_and_keeps_the_environment(monkeypatch, tmp_path):
    import huggingface_hub

    calls = {}

    class Api:
        def __init__(self, endpoint=None, token=None):
            calls["api"] = (endpoint, token)

        def dataset_info(self, repo, revision=None):
            calls["info"] = (repo, revision)
            return type("Info", (), {"sha": "0123abcd"})()

    def download(repo, **kw):
        calls["download"] = (repo, kw)
        return str(tmp_path)

    loaded = DatasetDict(train=Dataset.from_dict({"x": [1]}))
    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name: (path, name, loaded))
    before = dict(os.environ)
    out = huggingface("ylecun/mnist", endpoint="https://mirror.example", token="hf_x", config="c")
    assert out == (str(tmp_path), "c", loaded)
    assert calls["api"] == ("https://mirror.example", "hf_x")
    assert calls["info"] == ("ylecun/mnist", None)
    repo, kw = calls["download"]
    assert repo == "ylecun/mnist" and kw["revision"] == "0123abcd"
    assert kw["repo_type"] == "dataset" and kw["endpoint"] == "https://mirror.example"
    assert dict(os.environ) == before
