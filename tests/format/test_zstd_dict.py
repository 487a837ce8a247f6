"""The zstd_dict codec and loaderx.utils.train_dict: round trips, the spec's
codec-change recipe, dictionary corruption, determinism and every error path."""

import os
import shutil

import numpy as np
import pytest

import loaderx.utils as utils
from conftest import host
from loaderx.utils import DEFAULT_DICT_SIZE, train_dict
from loaderx.zrecord import Dense, Ragged, RaggedBatch, ZrecordError

VOCAB = 50257


def tokens(rng, n, lo=16, hi=200):
    """Token-like int32 records: Zipf ids, variable lengths."""
    lengths = rng.integers(lo, hi, n)
    return [np.minimum(rng.zipf(1.3, k), VOCAB - 1).astype(np.int32) for k in lengths]


def images(rng, n, lo=100, hi=300):
    """Smooth uint8 (3, H, W) records, some over 128 KiB."""
    out = []
    for _ in range(n):
        h, w = (int(x) for x in rng.integers(lo, hi, 2))
        y = np.linspace(0, 4, h, dtype=np.float32)[:, None]
        x = np.linspace(0, 4, w, dtype=np.float32)[None, :]
        base = np.stack([np.sin(y * (c + 1) + x + rng.random()) for c in range(3)])
        noise = rng.integers(0, 3, base.shape)
        out.append(((base + 1) * 100 + noise).astype(np.uint8))
    return out


def same(batch, want):
    got = [host(t) for t in batch.to_tensors()]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def dense_store(path, data, codec="zstd_dict", dict_bytes=None):
    with Dense.create(path, data.dtype, data.shape[1:], codec=codec, dict_bytes=dict_bytes) as w:
        w.append(data)
    return Dense.open(path)


def ragged_store(path, recs, codec="zstd_dict", dict_bytes=None):
    with Ragged.create(
        path, recs[0].dtype, ndim=recs[0].ndim, codec=codec, dict_bytes=dict_bytes
    ) as w:
        w.append(RaggedBatch.from_records(recs))
    return Ragged.open(path)


def data_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if "data-" in f)


# ---- round trips -----------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, item_shape",
    [(np.int32, (3,)), (np.uint8, (7,)), (np.float64, ()), (np.int16, (2, 5)), (np.int32, (512,))],
)
def test_dense_round_trip(tmp_path, rng, dtype, item_shape):
    # The first four schemas have records of 12, 7, 8 and 20 bytes: below 64.
    data = (rng.zipf(1.5, (3000, *item_shape)) % 1000).astype(dtype)
    d = train_dict(data)
    with dense_store(tmp_path / "s", data, dict_bytes=d) as s:
        assert s.codec == "zstd_dict"
        assert s.dictionary == d
        assert host(s[:]).tobytes() == data.tobytes()
        idx = rng.integers(0, len(data), 500)
        got = host(s[idx])
        assert got.shape == (500, *item_shape) and got.dtype == data.dtype
        assert np.array_equal(got, data[idx])
        assert np.array_equal(host(s[17]), data[17])
        s.verify()


def test_ragged_round_trip_small_records(tmp_path, rng):
    # int16 records of 0..15 elements: 0..30 bytes each, including empty ones.
    recs = [(rng.zipf(1.5, k) % 300).astype(np.int16) for k in rng.integers(0, 16, 4000)]
    d = train_dict(recs)
    with ragged_store(tmp_path / "s", recs, dict_bytes=d) as s:
        assert s.dictionary == d
        same(s[:], recs)
        idx = rng.integers(0, len(recs), 300)
        same(s[idx], [recs[i] for i in idx])
        s.verify()


def test_ragged_round_trip_tokens_and_images(tmp_path, rng):
    recs = tokens(rng, 2000)
    with ragged_store(tmp_path / "t", recs, dict_bytes=train_dict(recs)) as s:
        idx = rng.integers(0, len(recs), 256)
        same(s[idx], [recs[i] for i in idx])
    imgs = images(rng, 20)
    with ragged_store(tmp_path / "i", imgs, dict_bytes=train_dict(imgs)) as s:
        same(s[:], imgs)
        same(s[3, 3, 0], [imgs[3], imgs[3], imgs[0]])


def test_dictionary_shrinks_small_records(tmp_path, rng):
    """The dictionary is actually used: on small similar records it beats plain zstd."""
    recs = tokens(rng, 3000, 16, 64)
    with ragged_store(tmp_path / "z", recs, codec="zstd"):
        pass
    with ragged_store(tmp_path / "d", recs, dict_bytes=train_dict(recs)):
        pass
    assert data_bytes(tmp_path / "d") < 0.9 * data_bytes(tmp_path / "z")


def test_dictionary_of_another_store_still_round_trips(tmp_path, rng):
    """A dictionary is a reusable artifact, not tied to the data it came from."""
    d = train_dict(tokens(rng, 500))
    other = tokens(np.random.default_rng(7), 300)
    with ragged_store(tmp_path / "s", other, dict_bytes=d) as s:
        same(s[:], other)


# ---- the spec's codec-change recipe ------------------------------------------------


def test_recipe_dense(tmp_path, rng):
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = (rng.zipf(1.4, (5000, 2, 8)) % 256).astype(np.uint8)
    dense_store(src, data, codec="zstd").close()

    with (
        Dense.open(src) as s,
        Dense.create(
            dst,
            dtype=s.dtype,
            item_shape=s.item_shape,
            codec="zstd_dict",
            dict_bytes=train_dict(s),
        ) as d,
    ):
        d.append(s[:])  # DLTensor -> DLTensor

    with Dense.open(dst) as out:
        assert out.codec == "zstd_dict" and out.item_shape == (2, 8)
        assert host(out[:]).tobytes() == data.tobytes()


def test_recipe_ragged(tmp_path, rng):
    src, dst = tmp_path / "src", tmp_path / "dst"
    recs = tokens(rng, 3000)
    ragged_store(src, recs, codec="raw").close()

    with (
        Ragged.open(src) as s,
        Ragged.create(dst, s.dtype, ndim=s.ndim, codec="zstd_dict", dict_bytes=train_dict(s)) as d,
    ):
        d.append(s[:])  # RaggedBatch -> RaggedBatch

    with Ragged.open(dst) as out:
        assert out.codec == "zstd_dict" and out.ndim == 1
        same(out[:], recs)


def test_recipe_ragged_images(tmp_path, rng):
    src, dst = tmp_path / "src", tmp_path / "dst"
    imgs = images(rng, 12, 150, 400)  # several records over 128 KiB
    ragged_store(src, imgs, codec="zstd").close()
    with (
        Ragged.open(src) as s,
        Ragged.create(dst, s.dtype, ndim=s.ndim, codec="zstd_dict", dict_bytes=train_dict(s)) as d,
    ):
        d.append(s[:])
    with Ragged.open(dst) as out:
        same(out[:], imgs)


# ---- dict.bin damage -------------------------------------------------------------


def _damage(path, how):
    p = path / "dict.bin"
    b = bytearray(p.read_bytes())
    if how == "flip":
        b[len(b) // 2] ^= 0x01
        p.write_bytes(bytes(b))
    elif how == "truncate":
        p.write_bytes(bytes(b[:-1]))
    elif how == "extend":
        p.write_bytes(bytes(b) + b"\0")
    else:
        p.unlink()


@pytest.mark.parametrize("how", ["flip", "truncate", "extend", "remove"])
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_damaged_dictionary_refuses_to_open(tmp_path, rng, how, kind):
    good = tmp_path / "good"
    if kind == "dense":
        data = (rng.zipf(1.4, (2000, 16)) % 500).astype(np.int32)
        dense_store(good, data, dict_bytes=train_dict(data)).close()
        opener = Dense.open
    else:
        recs = tokens(rng, 1000)
        ragged_store(good, recs, dict_bytes=train_dict(recs)).close()
        opener = Ragged.open
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    _damage(bad, how)
    with pytest.raises(ZrecordError, match=r"dict\.bin"):
        opener(bad)
    opener(good).close()  # the untouched copy still opens


# ---- train_dict: sources and determinism --------------------------------------------


def test_train_dict_returns_bytes_within_size(rng):
    data = (rng.zipf(1.3, (20000, 64)) % VOCAB).astype(np.int32)
    d = train_dict(data)
    assert isinstance(d, bytes) and 0 < len(d) <= DEFAULT_DICT_SIZE
    small = train_dict(data, size=4096)
    assert 0 < len(small) <= 4096


def test_default_size_is_capped_for_small_corpora(rng):
    recs = tokens(rng, 100, 16, 32)  # about 9 KiB of records
    total = sum(r.nbytes for r in recs)
    assert len(train_dict(recs)) <= total // 10


def test_train_dict_is_deterministic(rng):
    data = (rng.zipf(1.3, (20000, 64)) % VOCAB).astype(np.int32)  # 5 MiB: sampled
    assert train_dict(data, size=8192) == train_dict(data.copy(), size=8192)
    recs = tokens(rng, 5000)
    assert train_dict(iter(recs), size=2048) == train_dict(list(recs), size=2048)


def test_array_and_dense_store_give_the_same_dictionary(tmp_path, rng):
    data = (rng.zipf(1.3, (30000, 32)) % VOCAB).astype(np.int32)  # sampled at size=4096
    with dense_store(tmp_path / "s", data, codec="raw") as s:
        assert train_dict(s, size=4096) == train_dict(data, size=4096)
        assert train_dict(s) == train_dict(data)


def test_every_ragged_source_gives_the_same_dictionary_when_unsampled(tmp_path, rng):
    recs = tokens(rng, 1500)
    expect = train_dict(recs)
    with ragged_store(tmp_path / "s", recs, codec="zstd") as s:
        assert train_dict(s) == expect
        assert train_dict(s[:]) == expect  # a RaggedBatch
        assert train_dict(iter(s)) == expect  # one-record RaggedBatches
    assert train_dict(RaggedBatch.from_records(recs)) == expect
    assert train_dict(r for r in recs) == expect


def test_dense_store_iteration_and_dltensor_sources(tmp_path, rng):
    data = (rng.zipf(1.3, (2000, 16)) % VOCAB).astype(np.int32)
    expect = train_dict(data)
    with dense_store(tmp_path / "s", data, codec="raw") as s:
        assert train_dict(s[:]) == expect  # a stacked DLTensor
        assert train_dict(iter(s)) == expect  # one DLTensor per record


class CountingRagged(Ragged):
    """A Ragged reader that counts the records train_dict reads."""

    read = 0

    def __getitem__(self, key):
        batch = super().__getitem__(key)
        type(self).read += len(batch)
        return batch


def test_large_store_is_sampled_not_read_whole(tmp_path, rng):
    recs = tokens(rng, 20000, 16, 128)  # about 5.5 MiB
    ragged_store(tmp_path / "s", recs, codec="raw").close()
    CountingRagged.read = 0
    with CountingRagged.open(tmp_path / "s") as s:
        d = train_dict(s, size=1024)  # a budget of 100 KiB of samples
        assert 0 < len(d) <= 1024
        assert CountingRagged.read < 2000  # a 256-record probe and about 400 samples
        assert train_dict(s, size=1024) == d


def test_huge_records_are_windowed(monkeypatch, rng):
    """Records over 128 KiB contribute one 128 KiB window each to zstd."""
    seen = []
    real = utils._native.train_dictionary

    def spy(data, sizes, max_size):
        seen.append(list(sizes))
        return real(data, sizes, max_size)

    monkeypatch.setattr(utils._native, "train_dictionary", spy)
    recs = [rng.integers(0, 4, (1 << 20) + i, dtype=np.uint8) for i in range(8)]
    assert len(train_dict(recs, size=4096)) <= 4096
    assert seen == [[128 * 1024] * 8]


# ---- codec argument errors -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_zstd_dict_requires_dict_bytes(tmp_path, kind):
    path = tmp_path / "s"
    with pytest.raises(ValueError, match="codec 'zstd_dict' needs dict_bytes; train one"):
        if kind == "dense":
            Dense.create(path, np.int32, (4,), codec="zstd_dict")
        else:
            Ragged.create(path, np.int32, ndim=1, codec="zstd_dict")
    assert not path.exists()


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_dict_bytes_with_another_codec(tmp_path, rng, kind, codec):
    d = train_dict(tokens(rng, 200))
    path = tmp_path / "s"
    msg = f"dict_bytes is only used by codec 'zstd_dict', not '{codec}'"
    with pytest.raises(ValueError, match=msg):
        if kind == "dense":
            Dense.create(path, np.int32, (4,), codec=codec, dict_bytes=d)
        else:
            Ragged.create(path, np.int32, ndim=1, codec=codec, dict_bytes=d)
    assert not path.exists()


def test_dict_bytes_type_and_emptiness(tmp_path):
    with pytest.raises(TypeError, match="dict_bytes must be bytes, got str"):
        Dense.create(tmp_path / "a", np.int32, (4,), codec="zstd_dict", dict_bytes="abc")
    with pytest.raises(ValueError, match="dict_bytes is empty"):
        Ragged.create(tmp_path / "b", np.int32, ndim=1, codec="zstd_dict", dict_bytes=b"")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_dict_bytes_accepts_bytes_like(tmp_path, rng):
    data = (rng.zipf(1.3, (1000, 8)) % VOCAB).astype(np.int32)
    d = train_dict(data)
    with dense_store(tmp_path / "s", data, dict_bytes=bytearray(d)) as s:
        assert s.dictionary == d
        assert np.array_equal(host(s[:]), data)


# ---- train_dict errors -------------------------------------------------------------------


def test_too_few_records(rng):
    recs = tokens(rng, 7, 500, 600)  # plenty of bytes, but only seven samples
    with pytest.raises(ValueError, match="at least 8 non-empty records to train on, got 7"):
        train_dict(recs)
    with pytest.raises(ValueError, match="got 0"):
        train_dict(np.zeros((0, 16), np.int32))
    with pytest.raises(ValueError, match="got 0"):
        train_dict([np.zeros(0, np.int32)] * 20)  # empty records carry nothing


def test_too_few_bytes_for_the_default_size(rng):
    recs = [np.arange(8, dtype=np.int32)] * 50  # 1600 bytes
    with pytest.raises(ValueError, match="hold only 1600 bytes; a dictionary needs at least 2560"):
        train_dict(recs)


def test_too_few_bytes_for_an_explicit_size(rng):
    data = (rng.zipf(1.3, (100, 16)) % VOCAB).astype(np.int32)  # 6400 bytes
    with pytest.raises(
        ValueError, match="6400 bytes of samples are too few for a 4096-byte dictionary"
    ):
        train_dict(data, size=4096)
    assert len(train_dict(data, size=512)) <= 512


def test_size_argument(rng):
    data = (rng.zipf(1.3, (1000, 16)) % VOCAB).astype(np.int32)
    with pytest.raises(ValueError, match="size must be >= 256, got 100"):
        train_dict(data, size=100)
    with pytest.raises(TypeError, match="size must be an integer, got float"):
        train_dict(data, size=4096.0)
    with pytest.raises(TypeError, match="size must be an integer, got bool"):
        train_dict(data, size=True)
    with pytest.raises(TypeError):
        train_dict(data, 4096)  # keyword-only


@pytest.mark.parametrize("source", [None, 5, 3.5, "tokens", b"bytes", {"a": 1}, object()])
def test_wrong_source_type(source):
    with pytest.raises(TypeError, match="train_dict takes a NumPy array, a RaggedBatch"):
        train_dict(source)


def test_wrong_record_type(rng):
    recs = tokens(rng, 10)
    recs[3] = [1, 2, 3]
    with pytest.raises(TypeError, match="record 3 is a list; train_dict's iterable must yield"):
        train_dict(recs)


def test_unstorable_dtypes():
    with pytest.raises(ValueError, match="object dtype is not supported"):
        train_dict(np.empty((20, 4), dtype=object))
    with pytest.raises(ValueError, match="string/bytes dtype"):
        train_dict([np.array(["abc"] * 4)] * 20)


def test_zero_dimensional_array():
    with pytest.raises(ValueError, match="0-dimensional array holds no records"):
        train_dict(np.array(5))


def test_writer_and_closed_store(tmp_path, rng):
    recs = tokens(rng, 50)
    with Ragged.create(tmp_path / "w", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(recs))
        with pytest.raises(TypeError, match="train_dict cannot read a writer"):
            train_dict(w)
    s = Ragged.open(tmp_path / "w")
    s.close()
    with pytest.raises(ValueError, match="the store is closed"):
        train_dict(s)


def test_zstd_failure_becomes_value_error(monkeypatch, rng):
    """zstd's own refusal reaches the caller as ValueError with context."""

    def refuse(data, sizes, max_size):
        raise ValueError("dictionary training failed: Src size is incorrect")

    monkeypatch.setattr(utils._native, "train_dictionary", refuse)
    data = (rng.zipf(1.3, (1000, 16)) % VOCAB).astype(np.int32)
    with pytest.raises(
        ValueError,
        match=r"zstd could not train a dictionary of up to 6400 bytes from 1000 samples "
        r"\(64000 bytes\): dictionary training failed: Src size is incorrect",
    ):
        train_dict(data)
