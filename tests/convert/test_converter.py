"""loaderx.converter: Hugging Face datasets, Arrow tables and Parquet into Zrecord stores."""

import io
import os
import sys
import wave

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from datasets import (  # noqa: E402
    Array2D,
    Audio,
    ClassLabel,
    Dataset,
    DatasetDict,
    Features,
    Image,
    Sequence,
    Value,
)

from loaderx.converter import CodecAdviceWarning, Conversion, convert, huggingface  # noqa: E402
from loaderx.errors import InvalidArgumentError, MissingDependencyError  # noqa: E402
from loaderx.zrecord import Dense, Ragged  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::loaderx.converter.CodecAdviceWarning")


def records(store):
    return [np.from_dlpack(t) for t in store[:].to_tensors()]


def as_lists(store):
    return [r.tolist() for r in records(store)]


def test_the_spec_example(tmp_path):
    dataset = Dataset.from_dict(
        {"tokens": [[1, 2], [3], [4, 5, 6]]},
        features=Features({"tokens": Sequence(Value("int32"))}),
    )
    out = convert(dataset, tmp_path / "tokens", codec="raw", progress=False)
    assert isinstance(out, Conversion)
    assert os.fspath(out) == str(out) == out.path == out == str(tmp_path / "tokens")
    assert type(out.path) is str and out + "/tokens" == str(tmp_path / "tokens" / "tokens")
    with Ragged.open(tmp_path / "tokens" / "tokens") as rs:
        assert rs.dtype == np.int32 and rs.ndim == 1 and rs.codec == "raw"
        assert as_lists(rs) == [[1, 2], [3], [4, 5, 6]]
    (col,) = out.columns
    assert (col.split, col.column, col.kind, col.dtype, col.shape) == (
        None,
        "tokens",
        "ragged",
        np.int32,
        (None,),
    )
    assert (col.records, col.raw_bytes, col.stored_bytes, col.advice) == (3, 24, 24, None)
    assert col.path == str(tmp_path / "tokens" / "tokens")
    assert out.summary().splitlines()[1] == (
        "  tokens: 3 records, ragged int32 ndim=1, raw: 24 raw bytes -> 24 stored (1.00x)"
    )
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
        assert s.dtype == np.int32 and as_lists(s) == data["tokens"]
    with Ragged.open(root / "raw") as s:
        assert s.dtype == np.uint8 and [r.tobytes() for r in records(s)] == data["raw"]
    with Ragged.open(root / "vol") as s:
        assert s.dtype == np.float64 and s.ndim == 2
        want = [np.reshape(v["values"], v["shape"]).tolist() for v in data["vol"]]
        assert as_lists(s) == want
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
    out = convert(dd, tmp_path / "out", codec="raw", data_shards=2, progress=False)
    assert sorted(os.listdir(tmp_path / "out")) == ["test", "train"]
    check_split(tmp_path / "out" / "train", train)
    check_split(tmp_path / "out" / "test", test)
    assert [(c.split, c.column, c.records) for c in out.columns] == [
        (s, c, n) for s, n in (("train", 5000), ("test", 7)) for c in FEATURES
    ]


def test_row_order_follows_the_dataset_after_shuffle_and_select(tmp_path):
    ds = Dataset.from_dict({"x": list(range(100)), "t": [[i] * (i % 3) for i in range(100)]})
    view = ds.shuffle(seed=3).select(range(10, 60))
    convert(view, tmp_path / "v", codec="zstd", progress=False)
    with Dense.open(tmp_path / "v" / "x") as s:
        xs = np.from_dlpack(s[:]).tolist()
    assert xs == view["x"]
    with Ragged.open(tmp_path / "v" / "t") as s:
        assert as_lists(s) == view["t"]


def test_progress_reports_the_rows_of_each_store(tmp_path, capsys):
    from loaderx.progress import ProgressEvent

    events = []
    dd = DatasetDict(
        train=Dataset.from_dict({"x": list(range(5000)), "t": [[1]] * 5000}),
        test=Dataset.from_dict({"x": [1, 2], "t": [[1], []]}),
    )
    convert(dd, tmp_path / "p", codec="raw", progress=events.append)
    want = []
    # The bytes each column holds after d rows: int64 x, and int64 t of one
    # element per row but the test split's last, empty one.
    size = {
        "x": lambda split, d: 8 * d,
        "t": lambda split, d: 8 * min(d, 1 if split == "test" else d),
    }
    for split, steps in (("train", (4096, 5000)), ("test", (2,))):
        for c in ("x", "t"):
            name, total = f"convert {split}/{c}", steps[-1]
            want.append(ProgressEvent(name, "rows", 0, total))
            want.extend(
                ProgressEvent(name, "rows", d, total, nbytes=size[c](split, d)) for d in steps
            )
            want.append(ProgressEvent(name, "rows", total, total, True, size[c](split, total)))
    assert events == want
    assert capsys.readouterr().err == ""  # a callback prints nothing
    convert(dd, tmp_path / "q", codec="raw")  # stderr is not a terminal: silent
    assert capsys.readouterr().err == ""


# ---- files: Image, Audio ---------------------------------------------------------


def encoded_image(shape, fmt, seed, mode="RGB"):
    pil = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    buf = io.BytesIO()
    pil.fromarray(pixels, mode=None).convert(mode).save(buf, format=fmt)
    return buf.getvalue()


def wav_bytes(n, seed):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.random.default_rng(seed).integers(-1000, 1000, n, np.int16).tobytes())
    return buf.getvalue()


def file_column(files, paths=None):
    storage = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    paths = paths or [None] * len(files)
    return pa.array([{"bytes": b, "path": p} for b, p in zip(files, paths, strict=True)], storage)


def test_image_and_audio_columns_are_their_encoded_files(tmp_path):
    pngs = [encoded_image((5 + i, 7, 3), "PNG", i) for i in range(3)]
    jpgs = [encoded_image((8, 8 + i, 3), "JPEG", 10 + i) for i in range(3)]
    wavs = [wav_bytes(100 * (i + 1), i) for i in range(3)]
    # One row keeps only the path of its file, as datasets does for local images.
    on_disk = tmp_path / "third.png"
    on_disk.write_bytes(pngs[2])
    table = pa.table(
        {
            "png": file_column([pngs[0], pngs[1], None], [None, None, str(on_disk)]),
            "jpg": file_column(jpgs),
            "wav": file_column(wavs),
        }
    )
    features = Features({"png": Image(), "jpg": Image(decode=False), "wav": Audio()})
    ds = Dataset(table, info=datasets.DatasetInfo(features=features))
    out = convert(ds, tmp_path / "f", codec="raw", progress=False)
    for name, files in (("png", pngs), ("jpg", jpgs), ("wav", wavs)):
        with Ragged.open(tmp_path / "f" / name) as s:
            assert (s.dtype, s.ndim, len(s)) == (np.uint8, 1, 3)
            assert [r.tobytes() for r in records(s)] == files
    assert [c.kind for c in out.columns] == ["ragged"] * 3


def test_a_missing_file_names_its_row_and_path(tmp_path):
    table = pa.table({"img": file_column([b"x", None], [None, str(tmp_path / "gone.png")])})
    ds = Dataset(table, info=datasets.DatasetInfo(features=Features({"img": Image()})))
    with pytest.raises(InvalidArgumentError, match=r"'img': row 1 refers to the file .*gone.png"):
        convert(ds, tmp_path / "f", codec="raw", progress=False)
    assert sorted(os.listdir(tmp_path)) == []


def image_dataset(shapes, fmt="PNG", mode=None):
    files = [encoded_image(s, fmt, i) for i, s in enumerate(shapes)]
    ds = Dataset.from_dict(
        {"img": [{"bytes": f, "path": None} for f in files], "y": list(range(len(files)))},
        features=Features({"img": Image(mode=mode), "y": Value("int64")}),
    )
    return ds, files


def test_decode_ragged_keeps_each_images_size_and_matches_datasets(tmp_path):
    ds, files = image_dataset([(5, 7, 3), (9, 4, 3), (1, 1, 3)] * 30)  # 90: two slices
    out = convert(ds, tmp_path / "d", codec="raw", decode={"img": "ragged"}, progress=False)
    with Ragged.open(tmp_path / "d" / "img") as s:
        assert (s.dtype, s.ndim, len(s)) == (np.uint8, 3, 90)
        assert s.attrs["decode"] == "ragged" and s.attrs["feature"] == repr(Image())
        got = records(s)
    for i, r in enumerate(got):
        assert np.array_equal(r, np.asarray(ds[i]["img"]))  # datasets' own decoding
    assert got[0].shape == (5, 7, 3) and got[1].shape == (9, 4, 3)
    assert out.columns[0].raw_bytes == sum(r.nbytes for r in got)


def test_decode_dense_needs_one_size(tmp_path):
    ds, _ = image_dataset([(6, 5, 3)] * 4, fmt="JPEG")
    convert(ds, tmp_path / "d", codec="zstd", decode={"img": "dense"}, progress=False)
    with Dense.open(tmp_path / "d" / "img") as s:
        assert (s.dtype, s.item_shape) == (np.uint8, (6, 5, 3))
        assert np.array_equal(np.from_dlpack(s[:]), np.stack([np.asarray(r["img"]) for r in ds]))
    mixed, _ = image_dataset([(6, 5, 3), (6, 5, 3), (7, 5, 3)])
    with pytest.raises(InvalidArgumentError, match=r"'img': row 2 has shape \(7, 5, 3\), earlier"):
        convert(mixed, tmp_path / "m", codec="raw", decode={"img": "dense"}, progress=False)
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_decode_converts_to_the_features_mode_only(tmp_path):
    ds, _ = image_dataset([(4, 4, 3)] * 2, mode="L")
    convert(ds, tmp_path / "g", codec="raw", decode={"img": "ragged"}, progress=False)
    with Ragged.open(tmp_path / "g" / "img") as s:
        assert s.ndim == 2
        assert all(np.array_equal(r, np.asarray(ds[i]["img"])) for i, r in enumerate(records(s)))


def test_undecodable_and_palette_images_name_their_row(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    good = encoded_image((3, 3, 3), "PNG", 0)
    buf = io.BytesIO()
    pil.new("P", (2, 2)).save(buf, format="PNG")
    for bad, message in (
        (b"not an image", "'img': row 1 is not a decodable image"),
        (buf.getvalue(), r"'img': row 1 is a palette image.*Image\(mode='RGB'\)"),
    ):
        ds = Dataset.from_dict(
            {"img": [{"bytes": good, "path": None}, {"bytes": bad, "path": None}]},
            features=Features({"img": Image()}),
        )
        with pytest.raises(InvalidArgumentError, match=message):
            convert(ds, tmp_path / "d", codec="raw", decode={"img": "ragged"}, progress=False)
        assert os.listdir(tmp_path) == []


def test_decode_without_pillow_says_what_to_install(tmp_path, monkeypatch):
    ds, _ = image_dataset([(2, 2, 3)])
    monkeypatch.setitem(sys.modules, "PIL.Image", None)  # import fails
    with pytest.raises(MissingDependencyError, match="decodes images with Pillow") as e:
        convert(ds, tmp_path / "d", codec="raw", decode={"img": "ragged"}, progress=False)
    assert e.value.name == "PIL"
    assert os.listdir(tmp_path) == []


def pcm_wav(frames, rate=8000):
    """A 16-bit PCM WAV file of `frames` ((n, channels) int16), written with the
    standard library, so the expected samples do not come from the decoder."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.ascontiguousarray(frames, "<i2").tobytes())
    return buf.getvalue()


def audio_dataset(files, feature=None):
    # Built from Arrow: Dataset.from_dict would encode through torchcodec.
    features = Features({"wav": feature or Audio()})
    return Dataset(
        pa.table({"wav": file_column(files)}), info=datasets.DatasetInfo(features=features)
    )


def test_decode_audio_ragged_keeps_each_files_samples_exactly(tmp_path):
    pytest.importorskip("soundfile")
    rng = np.random.default_rng(3)
    clips = [rng.integers(-32768, 32768, (n, 2), dtype=np.int16) for n in (50, 0, 1, 300) * 20]
    ds = audio_dataset([pcm_wav(c) for c in clips])  # 80 rows: two decoded slices
    convert(ds, tmp_path / "a", codec="zstd", decode={"wav": "ragged"}, progress=False)
    with Ragged.open(tmp_path / "a" / "wav") as s:
        assert (s.dtype, s.ndim, len(s)) == (np.int16, 2, 80)
        assert (s.attrs["sampling_rate"], s.attrs["decode"]) == (8000, "ragged")
        got = records(s)
    assert [g.shape for g in got] == [c.shape for c in clips]
    assert all(np.array_equal(g, c) for g, c in zip(got, clips, strict=True))


def test_decode_audio_keeps_float_samples_and_dense_needs_one_length(tmp_path):
    sf = pytest.importorskip("soundfile")
    clips = np.random.default_rng(4).standard_normal((3, 40, 1)).astype(np.float32)
    files = []
    for c in clips:
        buf = io.BytesIO()
        sf.write(buf, c, 16000, format="WAV", subtype="FLOAT")
        files.append(buf.getvalue())
    convert(audio_dataset(files), tmp_path / "d", codec="raw", decode={"wav": "dense"},
            progress=False)  # fmt: skip
    with Dense.open(tmp_path / "d" / "wav") as s:
        assert (s.dtype, s.item_shape, s.attrs["sampling_rate"]) == (np.float32, (40, 1), 16000)
        assert np.from_dlpack(s[:]).tobytes() == clips.tobytes()
    mixed = [pcm_wav(np.zeros((n, 1), np.int16)) for n in (5, 5, 6)]
    with pytest.raises(InvalidArgumentError, match=r"'wav': row 2 has shape \(6, 1\).*length"):
        convert(audio_dataset(mixed), tmp_path / "m", codec="raw", decode={"wav": "dense"},
                progress=False)  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["d"]


def test_decode_audio_refuses_a_second_rate_and_never_resamples(tmp_path):
    pytest.importorskip("soundfile")
    one = np.zeros((4, 1), np.int16)
    ds = audio_dataset([pcm_wav(one, 8000), pcm_wav(one, 8000), pcm_wav(one, 22050)])
    with pytest.raises(InvalidArgumentError, match=r"'wav': row 2 is sampled at 22050 Hz, the "
                       r"column at 8000 Hz; .*resample with Dataset.map"):  # fmt: skip
        convert(ds, tmp_path / "r", codec="raw", decode={"wav": "ragged"}, progress=False)
    declared = audio_dataset([pcm_wav(one, 8000)], Audio(sampling_rate=16000))
    with pytest.raises(InvalidArgumentError, match=r"row 0 is sampled at 8000 Hz, the column at "
                       r"16000 Hz"):  # fmt: skip
        convert(declared, tmp_path / "r", codec="raw", decode={"wav": "ragged"}, progress=False)
    with pytest.raises(InvalidArgumentError, match=r"'wav': row 0 is not decodable audio"):
        convert(audio_dataset([b"RIFF junk"]), tmp_path / "r", codec="raw",
                decode={"wav": "ragged"}, progress=False)  # fmt: skip
    assert os.listdir(tmp_path) == []


def test_decode_audio_without_soundfile_says_what_to_install(tmp_path, monkeypatch):
    ds = audio_dataset([pcm_wav(np.zeros((4, 1), np.int16))])
    monkeypatch.setitem(sys.modules, "soundfile", None)  # import fails
    with pytest.raises(MissingDependencyError, match="decodes audio with soundfile") as e:
        convert(ds, tmp_path / "d", codec="raw", decode={"wav": "ragged"}, progress=False)
    assert e.value.name == "soundfile"
    assert os.listdir(tmp_path) == []


# ---- lists: what Dataset.map makes of arrays, boxes ------------------------------


def test_mapped_arrays_are_ragged_by_default_and_dense_when_asked(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, (3, 2 + i % 2, 3), dtype=np.uint8) for i in range(6)]
    ds = Dataset.from_dict({"i": list(range(6))}).map(lambda r: {"a": arrays[r["i"]]})
    assert str(ds.data.schema.field("a").type) == "list<item: list<item: list<item: uint8>>>"
    convert(ds, tmp_path / "r", codec="raw", progress=False)
    with Ragged.open(tmp_path / "r" / "a") as s:
        assert s.ndim == 3
        got = records(s)
    assert all(np.array_equal(g, a) for g, a in zip(got, arrays, strict=True))
    same = ds.select([0, 2, 4])
    convert(same, tmp_path / "d", codec="raw", dense=["a"], progress=False)
    with Dense.open(tmp_path / "d" / "a") as s:
        assert s.item_shape == (3, 2, 3)
        assert np.array_equal(np.from_dlpack(s[:]), np.stack(arrays[0:6:2]))
    with pytest.raises(InvalidArgumentError, match=r"'a': row 1 has shape \(3, 3, 3\), row 0"):
        convert(ds, tmp_path / "x", codec="raw", dense=["a"], progress=False)
    assert sorted(os.listdir(tmp_path)) == ["d", "r"]


def test_irregular_nested_lists_name_their_row(tmp_path):
    ds = Dataset.from_dict({"t": [[[1, 2], [3, 4]], [[1], [2, 3]]]})
    with pytest.raises(InvalidArgumentError, match="'t': row 1 is not a regular array"):
        convert(ds, tmp_path / "x", codec="raw", progress=False)
    assert os.listdir(tmp_path) == []


def test_boxes_are_n_by_4_records_with_empty_ones(tmp_path):
    boxes = [[[0, 0, 1, 1], [2, 2, 3, 5]], [], [[1.5, 2, 3, 4]]] * 3
    ds = Dataset.from_dict(
        {"boxes": boxes},
        features=Features({"boxes": Sequence(Sequence(Value("float32"), length=4))}),
    )
    convert(ds, tmp_path / "b", codec="zstd", progress=False)
    with Ragged.open(tmp_path / "b" / "boxes") as s:
        assert (s.dtype, s.ndim) == (np.float32, 2)
        got = records(s)
    assert [g.shape for g in got[:3]] == [(2, 4), (0, 4), (1, 4)]
    assert [g.tolist() for g in got] == boxes


def test_array2d_with_a_free_first_dimension_is_ragged(tmp_path):
    rows = [np.arange(4 * k, dtype=np.float32).reshape(k, 4) for k in (2, 0, 3)]
    ds = Dataset.from_dict(
        {"a": [r.tolist() for r in rows]}, features=Features({"a": Array2D((None, 4), "float32")})
    )
    convert(ds, tmp_path / "a", codec="raw", progress=False)
    with Ragged.open(tmp_path / "a" / "a") as s:
        got = records(s)
    assert [g.shape for g in got] == [(2, 4), (0, 4), (3, 4)]
    assert all(np.array_equal(g, r) for g, r in zip(got, rows, strict=True))


# ---- ClassLabel and strings ------------------------------------------------------


def test_class_labels_are_integers(tmp_path):
    ds = Dataset.from_dict(
        {"y": [2, 0, 1, 2]}, features=Features({"y": ClassLabel(names=["cat", "dog", "eel"])})
    )
    convert(ds, tmp_path / "c", codec="raw", progress=False)
    with Dense.open(tmp_path / "c" / "y") as s:
        assert s.dtype == np.int64 and np.from_dlpack(s[:]).tolist() == [2, 0, 1, 2]


def test_attributes_record_the_source_and_the_feature(tmp_path):
    names = ["cat", "dog", "eel"]
    features = Features({"y": ClassLabel(names=names), "tags": Sequence(ClassLabel(names=names))})
    ds = Dataset.from_dict({"y": [2, 0], "tags": [[1], [0, 2]]}, features=features)
    convert(DatasetDict(train=ds), tmp_path / "a", codec="raw", attrs={"project": "demo"})
    with Dense.open(tmp_path / "a" / "train" / "y") as s:
        y = s.attrs
    with Ragged.open(tmp_path / "a" / "train" / "tags") as s:
        tags = s.attrs
    source = {
        "kind": "datasets.Dataset",
        "dataset_name": None,
        "config_name": None,
        "split": None,
        "fingerprint": ds._fingerprint,
        "cache_files": [],
    }
    assert y == {
        "converter": "loaderx.converter.convert",
        "column": "y",
        "split": "train",
        "feature": repr(features["y"]),
        "arrow_type": "int64",
        "source": source,
        "class_names": names,
        "project": "demo",
    }
    assert tags["class_names"] == names and tags["arrow_type"] == "list<item: int64>"
    convert(pa.table({"x": [1.5]}), tmp_path / "t", codec="raw")
    with Dense.open(tmp_path / "t" / "x") as s:
        assert s.attrs["source"] == {"kind": "pyarrow.Table"}
        assert (s.attrs["feature"], s.attrs["split"]) == ("Value('float64')", None)
    with pytest.raises(InvalidArgumentError, match=r"attrs= uses the key\(s\) \['column'\]"):
        convert(ds, tmp_path / "b", codec="raw", attrs={"column": 1})


def test_strings_as_utf8_bytes_only_when_asked(tmp_path):
    text = ["héllo", "", "日本語", "a\0b"]
    ds = Dataset.from_dict({"text": text, "n": [1, 2, 3, 4]})
    with pytest.raises(InvalidArgumentError, match=r"'text': string values; pass utf8=\['text'\]"):
        convert(ds, tmp_path / "s", codec="raw", progress=False)
    convert(ds, tmp_path / "s", codec="raw", utf8=["text"], progress=False)
    with Ragged.open(tmp_path / "s" / "text") as s:
        assert s.dtype == np.uint8 and s.attrs["utf8"] is True
        assert [r.tobytes().decode("utf-8") for r in records(s)] == text


def test_dtypes_converts_only_what_is_asked_and_keeps_integers_exact(tmp_path):
    rng = np.random.default_rng(3)
    f = rng.random(50)
    ds = Dataset.from_dict({"f": f, "i": list(range(50)), "t": [[1, -2], [300]] * 25})
    out = convert(
        ds, tmp_path / "c", codec="raw", dtypes={"f": "float32", "i": np.int8, "t": np.int16}
    )
    with Dense.open(tmp_path / "c" / "f") as s:
        assert s.dtype == np.float32 and s.attrs["cast_from"] == "float64"
        assert np.array_equal(np.from_dlpack(s[:]), f.astype(np.float32))
    with Dense.open(tmp_path / "c" / "i") as s:
        assert s.dtype == np.int8 and np.from_dlpack(s[:]).tolist() == list(range(50))
    with Ragged.open(tmp_path / "c" / "t") as s:
        assert s.dtype == np.int16 and as_lists(s) == [[1, -2], [300]] * 25
    assert [c.dtype for c in out.columns] == [np.float32, np.int8, np.int16]
    with pytest.raises(InvalidArgumentError, match=r"'t': row 1 holds 300, which int8 cannot"):
        convert(ds, tmp_path / "x", codec="raw", dtypes={"t": "int8"})
    with pytest.raises(InvalidArgumentError) as e:
        convert(
            ds.add_column("s", ["a"] * 50),
            tmp_path / "y",
            codec="raw",
            utf8=["s"],
            dtypes={"f": "int32", "s": "int8", "nope": "int8"},
        )
    for line in (
        "column 'f': dtypes= asks float64 values to become int32, which truncates them",
        "column 's': dtypes= applies to columns of numbers",
        "dtypes= names 'nope', which is not a column",
    ):
        assert line in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["c"]


# ---- refusals: every problem in one error ----------------------------------------


def test_every_unstorable_column_is_reported_in_one_error(tmp_path):
    ds = Dataset.from_dict(
        {
            "ok": [1, 2],
            "n": [3, 4],
            "text": ["a", "b"],
            "holes": [[1], None],
            "nothing": [None, None],
            "pair": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}],
            "words": [["a"], ["b", "c"]],
            "when": pa.array([1, 2], pa.timestamp("s")).to_pylist(),
        }
    )
    with pytest.raises(InvalidArgumentError) as e:
        convert(
            ds,
            tmp_path / "out",
            codec={"ok": "raw"},
            decode={"ok": "ragged", "ghost": "dense"},
            utf8=["ok"],
            progress=False,
        )
    msg = str(e.value)
    assert msg.startswith("convert wrote nothing: ")
    expected = [
        "column 'ok': decode= applies to Image and Audio columns",
        "column 'text': string values; pass utf8=['text']",
        "column 'holes': 1 null value(s); fill them (Dataset.map) or drop those rows",
        "column 'nothing': it holds only nulls; drop it with Dataset.remove_columns",
        "column 'pair': a struct of fields ['a', 'b'] is not one array; store each field",
        "column 'words': string values",
        "column 'when': timestamp[us] values cannot be stored; convert needs numbers",
        "codec= names no codec for column 'n'",
        "decode= names 'ghost', which is not a column",
    ]
    for line in expected:
        assert f"  - {line}" in msg, line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["..", "a/b", "/abs/evil", "."])
def test_names_that_are_not_one_directory_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="cannot name a directory of the output"):
        convert(Dataset.from_dict({"a": [1], name: [2]}), tmp_path / "c", codec="raw")
    with pytest.raises(ValueError, match=f"split {name!r} cannot name a directory"):
        convert(DatasetDict({name: Dataset.from_dict({"a": [1]})}), tmp_path / "d", codec="raw")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: {"x": [1, 2]}, r"not a dict: for a dict of columns, pass datasets\.Dataset"),
        (lambda: {"train": {"x": [1]}}, r"not a dict: for a dict of columns"),
        (lambda: np.zeros(3), r"not a ndarray: for a NumPy array, pass datasets\.Dataset\.from"),
        (lambda: "some/dir", r"not a str: for a directory written by save_to_disk, pass"),
        (
            lambda: Dataset.from_dict({"x": [1]}).to_iterable_dataset(),
            "not an IterableDataset: materialize it first",
        ),
    ],
)
def test_inputs_that_are_not_datasets_say_what_to_pass(tmp_path, make, message):
    with pytest.raises(TypeError, match=message):
        convert(make(), tmp_path / "a", codec="raw", progress=False)
    assert os.listdir(tmp_path) == []


def test_argument_errors(tmp_path):
    ds = Dataset.from_dict({"x": [1, 2, 3]})
    with pytest.raises(ValueError, match="codec must be one of 'raw', 'zstd', 'zstd_dict'"):
        convert(ds, tmp_path / "a", codec="lz4", progress=False)
    with pytest.raises(ValueError, match="decode=.*the layout is 'dense' or 'ragged'"):
        convert(ds, tmp_path / "a", codec="raw", decode={"x": "big"}, progress=False)
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        convert(ds, tmp_path / "exists", codec="raw", progress=False)
    with pytest.raises(ValueError, match="has no rows"):
        convert(ds.select([]), tmp_path / "a", codec="raw", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["exists"]


# ---- Arrow tables and Parquet ----------------------------------------------------


def arrow_source():
    rng = np.random.default_rng(5)
    n = 300
    return pa.table(
        {
            "f": pa.array(rng.random(n)),  # float64 stays float64
            "i8": pa.array(rng.integers(-100, 100, n).astype(np.int8)),
            "seq": pa.array(
                [rng.integers(0, 9, rng.integers(0, 5)).tolist() for _ in range(n)],
                pa.list_(pa.int16()),
            ),
            "vec": pa.array(
                rng.random((n, 3)).astype(np.float32).tolist(), pa.list_(pa.float32(), 3)
            ),
            "blob": pa.array(
                [bytes(rng.integers(0, 255, i % 7).astype(np.uint8)) for i in range(n)]
            ),
        }
    )


def check_against(root, table):
    with Dense.open(root / "f") as s:
        assert s.dtype == np.float64 and np.from_dlpack(s[:]).tolist() == table["f"].to_pylist()
    with Dense.open(root / "i8") as s:
        assert s.dtype == np.int8 and np.from_dlpack(s[:]).tolist() == table["i8"].to_pylist()
    with Ragged.open(root / "seq") as s:
        assert s.dtype == np.int16 and as_lists(s) == table["seq"].to_pylist()
    with Dense.open(root / "vec") as s:
        assert (s.dtype, s.item_shape) == (np.float32, (3,))
        assert np.from_dlpack(s[:]).tolist() == table["vec"].to_pylist()
    with Ragged.open(root / "blob") as s:
        assert [r.tobytes() for r in records(s)] == table["blob"].to_pylist()


def test_a_pyarrow_table_round_trips_exactly(tmp_path):
    table = arrow_source()
    convert(table, tmp_path / "t", codec="zstd", progress=False)
    check_against(tmp_path / "t", table)


def test_parquet_files_round_trip_exactly(tmp_path):
    table = arrow_source()
    pq.write_table(table, tmp_path / "src.parquet", row_group_size=100)
    ds = Dataset.from_parquet(str(tmp_path / "src.parquet"), cache_dir=str(tmp_path / "cache"))
    convert(ds, tmp_path / "p", codec="raw", progress=False)
    check_against(tmp_path / "p", table)


# ---- codecs ----------------------------------------------------------------------


def small_similar_records(n, seed=0):
    """Rows of 16 int32 ids (64 bytes) built from a few recurring phrases."""
    rng = np.random.default_rng(seed)
    phrases = rng.integers(0, 50_000, (40, 4), dtype=np.int32)
    return [np.concatenate(phrases[rng.integers(0, 40, 4)]).tolist() for _ in range(n)]


def test_zstd_on_tiny_records_warns_and_zstd_dict_trains_from_the_column(tmp_path):
    rows = small_similar_records(4000)
    ds = Dataset.from_dict({"ids": rows}, features=Features({"ids": Sequence(Value("int32"))}))
    with pytest.warns(CodecAdviceWarning, match="records this small gain nothing from plain zstd"):
        plain = convert(ds, tmp_path / "z", codec="zstd", progress=False)
    (col,) = plain.columns
    assert col.raw_bytes == 4000 * 64 and col.stored_bytes > 0.95 * col.raw_bytes
    assert plain.advice == (col.advice,) and "codec='zstd_dict'" in col.advice
    assert f"advice: {col.advice}" in plain.summary()
    dct = convert(ds, tmp_path / "d", codec="zstd_dict", progress=False)
    (dcol,) = dct.columns
    assert dcol.advice is None and dcol.dict_bytes > 0
    assert dcol.stored_bytes < 0.5 * col.stored_bytes
    with Ragged.open(tmp_path / "d" / "ids") as s:
        assert s.codec == "zstd_dict" and as_lists(s) == rows
    assert (tmp_path / "d" / "ids" / "dict.bin").stat().st_size == dcol.dict_bytes


def test_zstd_dict_uses_a_given_dictionary(tmp_path):
    from loaderx.utils import train_dict

    rows = small_similar_records(1000, seed=1)
    d = train_dict([np.array(r, np.int32) for r in rows], size=1024)
    ds = Dataset.from_dict({"ids": rows, "y": list(range(1000))})
    out = convert(
        ds,
        tmp_path / "g",
        codec={"ids": "zstd_dict", "y": "raw"},
        dict_bytes={"ids": d},
        progress=False,
    )
    assert (tmp_path / "g" / "ids" / "dict.bin").read_bytes() == d
    assert [c.codec for c in out.columns] == ["zstd_dict", "raw"]
    with Ragged.open(tmp_path / "g" / "ids") as s:
        assert as_lists(s) == rows
    with pytest.raises(InvalidArgumentError, match="dict_bytes= gives a dictionary for column 'y'"):
        convert(ds, tmp_path / "h", codec="zstd", dict_bytes={"y": d}, progress=False)


# ---- the Hub, offline ------------------------------------------------------------


def closed_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SHA = "0123456789abcdef0123456789abcdef01234567"


def cache_with_snapshot(root, repo="someone/tiny"):
    """A hub cache holding one snapshot of a dataset repository, laid out the way
    huggingface_hub stores one: refs/main names the commit, snapshots/<commit>
    holds the files."""
    repo_dir = root / f"datasets--{repo.replace('/', '--')}"
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(SHA)
    data = repo_dir / "snapshots" / SHA / "data"
    data.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), data / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"x": [4]}), data / "test-00000-of-00001.parquet")
    return root


@pytest.fixture
def datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "ds-cache"))


@pytest.fixture
def online(monkeypatch):
    """huggingface_hub as without HF_HUB_OFFLINE, whatever the environment says."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def test_huggingface_uses_the_cached_snapshot_when_the_endpoint_is_unreachable(
    tmp_path, capsys, datasets_cache, online
):
    hub = cache_with_snapshot(tmp_path / "hub")
    endpoint = f"http://127.0.0.1:{closed_port()}"
    dd = huggingface("someone/tiny", endpoint=endpoint, cache_dir=hub)
    assert dd["train"]["x"] == [1, 2, 3] and dd["test"]["x"] == [4]
    convert(dd, tmp_path / "out", codec="raw", progress=False)
    with Dense.open(tmp_path / "out" / "train" / "x") as s:
        source = s.attrs["source"]
    assert {k: source[k] for k in ("hub_repo", "hub_revision", "hub_commit", "hub_endpoint")} == {
        "hub_repo": "someone/tiny",
        "hub_revision": "main",
        "hub_commit": SHA,
        "hub_endpoint": endpoint,
    }
    assert source["split"] == "train" and source["fingerprint"] == dd["train"]._fingerprint
    ours = [line for line in capsys.readouterr().err.splitlines() if "loaderx" in line]
    assert ours == [
        f"loaderx.huggingface: {endpoint} unreachable: using the cached snapshot {SHA} of "
        "someone/tiny (revision 'main')"
    ]


def test_huggingface_offline_never_calls_the_hub(tmp_path, capsys, monkeypatch, datasets_cache):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    def no(*a, **k):
        raise AssertionError("the Hub was called")

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", no)
    hub = cache_with_snapshot(tmp_path / "hub")
    dd = huggingface("someone/tiny", cache_dir=hub)
    assert dd["train"]["x"] == [1, 2, 3]
    ours = [line for line in capsys.readouterr().err.splitlines() if "loaderx" in line]
    assert ours == [
        f"loaderx.huggingface: offline (HF_HUB_OFFLINE): using the cached snapshot {SHA} of "
        "someone/tiny (revision 'main')"
    ]
    with pytest.raises(OSError, match=r"HF_HUB_OFFLINE is set and revision 'v2' is not in the"):
        huggingface("someone/tiny", revision="v2", cache_dir=hub)


@pytest.mark.parametrize("how", ["argument", "HF_ENDPOINT"])
def test_huggingface_unreachable_and_not_cached_is_one_sentence(tmp_path, monkeypatch, how, online):
    import traceback

    import huggingface_hub

    from loaderx.errors import StorageError

    endpoint = f"http://127.0.0.1:{closed_port()}"
    given = {"endpoint": endpoint}
    if how == "HF_ENDPOINT":  # what huggingface_hub read from the variable at import
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
        given = {}
    with pytest.raises(StorageError) as e:
        huggingface("someone/absent", cache_dir=tmp_path / "hub", **given)
    msg = str(e.value)
    assert msg.startswith(f"someone/absent: cannot reach the Hub at {endpoint} (")
    for hint in ("check the network or proxy", "HF_HUB_OFFLINE=1", "datasets.load_from_disk"):
        assert hint in msg
    assert "\n" not in msg
    # The network error is kept on the exception, but not printed with it.
    assert e.value.__context__ is not None and e.value.__suppress_context__
    printed = "".join(traceback.format_exception(e.value))
    assert "During handling" not in printed and "direct cause" not in printed
    assert len(printed.splitlines()) < 12


def test_huggingface_resolves_the_revision_and_keeps_the_environment(monkeypatch, tmp_path, online):
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
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name: loaded)
    before = dict(os.environ)
    out = huggingface("ylecun/mnist", endpoint="https://mirror.example", token="hf_x", config="c")
    assert out is loaded
    assert calls["api"] == ("https://mirror.example", "hf_x")
    assert calls["info"] == ("ylecun/mnist", None)
    repo, kw = calls["download"]
    assert repo == "ylecun/mnist" and kw["revision"] == "0123abcd"
    assert kw["repo_type"] == "dataset" and kw["endpoint"] == "https://mirror.example"
    assert dict(os.environ) == before
