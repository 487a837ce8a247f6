"""The public seams over a store's metadata: zrecord.open of either kind, record
sizes and statistics from the index, the dictionary and the data files' sizes."""

import numpy as np
import pytest

import loaderx.zrecord._reader as reader_module
from loaderx import zrecord
from loaderx.errors import InvalidArgumentError, StoreNotFoundError
from loaderx.utils import train_dict
from loaderx.zrecord import Dense, Ragged, RaggedBatch, RecordSizes, StoreStats

LENGTHS = [3, 0, 5, 1, 7]


@pytest.fixture
def stores(tmp_path):
    with Dense.create(tmp_path / "d", np.int32, (2, 3), codec="raw", data_shards=2) as w:
        w.append(np.arange(4 * 6, dtype=np.int32).reshape(4, 2, 3))
    records = [np.full(n, n, dtype=np.int16) for n in LENGTHS]
    with Ragged.create(tmp_path / "r", np.int16, ndim=1, codec="raw", data_shards=1) as w:
        w.append(RaggedBatch.from_records(records))
    return tmp_path / "d", tmp_path / "r"


def data_file_sizes(path):
    return tuple(p.stat().st_size for p in sorted(path.glob("data-*.bin")))


def test_open_returns_the_reader_of_the_store_s_kind(stores):
    d, r = stores
    with zrecord.open(d) as a, zrecord.open(r, checked=True) as b:
        assert (type(a), type(b)) == (Dense, Ragged)
        assert (a.shape, a.checked, b.checked, len(b)) == ((4, 2, 3), False, True, 5)
        assert np.from_dlpack(a[1]).tolist() == [[6, 7, 8], [9, 10, 11]]
        assert np.from_dlpack(b[2].values).tolist() == [5] * 5
    with pytest.raises(StoreNotFoundError):
        zrecord.open(d.parent / "missing")
    with pytest.raises(InvalidArgumentError, match="storage_options and cache apply to store URLs"):
        zrecord.open(d, storage_options={"retries": 1})
    with zrecord.open(d.as_uri()) as u:
        assert (type(u), u.url, len(u)) == (Dense, d.as_uri(), 4)


def test_record_sizes_come_from_the_index(stores, monkeypatch):
    d, r = stores
    with Dense.open(d) as a, Ragged.open(r) as b:
        sizes = a.record_sizes()
        assert isinstance(sizes, RecordSizes)
        assert (sizes.logical.tolist(), sizes.stored.tolist()) == ([24] * 4, [24] * 4)
        assert sizes.logical.dtype == sizes.stored.dtype == np.uint64
        assert b.record_sizes().logical.tolist() == [2 * n for n in LENGTHS]
        assert b.record_sizes(1, 4).logical.tolist() == [0, 10, 2]
        assert b.record_sizes(5).logical.tolist() == []
        # Read a step of the index at a time, the result is the same.
        monkeypatch.setattr(reader_module, "INDEX_STEP", 2)
        assert b.record_sizes().stored.tolist() == [2 * n for n in LENGTHS]
        assert b.record_sizes(1).logical.tolist() == [0, 10, 2, 14]
        with pytest.raises(InvalidArgumentError, match=r"^start must be in 0\.\.5, got 6$"):
            b.record_sizes(6)
        with pytest.raises(InvalidArgumentError, match=r"^stop must be in 3\.\.5, got 2$"):
            b.record_sizes(3, 2)
        with pytest.raises(TypeError, match="start must be an integer, got float"):
            b.record_sizes(1.0)  # type: ignore[arg-type]


def test_stats_sum_the_index_and_the_header(stores, monkeypatch):
    d, r = stores
    monkeypatch.setattr(reader_module, "INDEX_STEP", 2)
    with Dense.open(d) as a, Ragged.open(r) as b:
        assert a.stats() == StoreStats(
            records=4,
            logical_bytes=96,
            stored_bytes=96,
            data_files=2,
            data_file_bytes=sum(data_file_sizes(d)),
            dictionary_bytes=0,
        )
        assert b.stats() == StoreStats(
            records=5,
            logical_bytes=32,
            stored_bytes=32,
            data_files=1,
            data_file_bytes=sum(data_file_sizes(r)),
            dictionary_bytes=0,
        )
        assert (a.data_file_sizes, b.data_file_sizes) == (data_file_sizes(d), data_file_sizes(r))
        assert (a.dictionary, a.dtype_name, b.dtype_name) == (None, "int32", "int16")


def test_a_zstd_dict_store_reports_its_dictionary(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 20, (2000, 64), dtype=np.uint8)
    dictionary = train_dict(data)
    with Dense.create(
        tmp_path / "z", np.uint8, (64,), codec="zstd_dict", dict_bytes=dictionary
    ) as w:
        w.append(data)
    with Dense.open(tmp_path / "z") as z:
        stats = z.stats()
        assert z.dictionary == dictionary
        assert (
            stats.dictionary_bytes
            == len(dictionary)
            == (tmp_path / "z" / "dict.bin").stat().st_size
        )
        assert stats.logical_bytes == 2000 * 64
        assert stats.stored_bytes == int(z.record_sizes().stored.sum()) < stats.logical_bytes
        assert stats.data_file_bytes == sum(data_file_sizes(tmp_path / "z"))
