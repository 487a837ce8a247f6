"""Ragged.lengths(): each record's length along axis 0, from the index alone, for
local and remote stores."""

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS

from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense, Ragged, RaggedBatch

LENGTHS = [3, 0, 5, 1, 7, 70_000]


def write_tokens(path, codec="zstd"):
    records = [np.arange(n, dtype=np.int32) for n in LENGTHS]
    with Ragged.create(path, np.int32, ndim=1, codec=codec, data_shards=2) as w:
        w.append(RaggedBatch.from_records(records))


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_lengths_of_one_dimensional_records(tmp_path, codec):
    write_tokens(tmp_path / "t", codec)
    with Ragged.open(tmp_path / "t") as r:
        got = r.lengths()
        assert got.dtype == np.uint64 and got.flags.c_contiguous and got.flags.writeable
        assert got.tolist() == LENGTHS
        assert r.lengths(2).tolist() == LENGTHS[2:]
        assert r.lengths(1, 4).tolist() == [0, 5, 1]
        assert r.lengths(6).tolist() == []
        assert r.lengths(np.int64(3), np.uint8(4)).tolist() == [1]
        # A fresh array each call: changing one changes nothing else.
        got[0] = 99
        assert r.lengths()[0] == 3


def test_the_length_is_the_first_dimension(tmp_path):
    records = [np.zeros((n, 3), np.float32) for n in (2, 0, 9)] + [np.zeros((4, 1), np.float32)]
    with Ragged.create(tmp_path / "m", np.float32, ndim=2, codec="raw") as w:
        w.append(RaggedBatch.from_records(records))
    with Ragged.open(tmp_path / "m") as r:
        assert r.lengths().tolist() == [2, 0, 9, 4]


def test_no_payload_byte_is_read(tmp_path):
    write_tokens(tmp_path / "t", "raw")
    for f in tmp_path.joinpath("t").glob("data-*.bin"):
        f.write_bytes(b"\0" * f.stat().st_size)  # same size, every payload byte wrong
    with Ragged.open(tmp_path / "t", checked=True) as r:
        assert r.lengths().tolist() == LENGTHS


def test_arguments_are_checked(tmp_path):
    write_tokens(tmp_path / "t")
    with Ragged.open(tmp_path / "t") as r:
        with pytest.raises(InvalidArgumentError, match=r"^start must be in 0\.\.6, got 7$"):
            r.lengths(7)
        with pytest.raises(InvalidArgumentError, match=r"^stop must be in 3\.\.6, got 2$"):
            r.lengths(3, 2)
        with pytest.raises(TypeError, match="stop must be an integer, got float"):
            r.lengths(0, 1.0)  # type: ignore[arg-type]
    with Dense.create(tmp_path / "d", np.int32, (2,), codec="raw") as w:
        w.append(np.zeros((3, 2), np.int32))
    with Dense.open(tmp_path / "d") as d:
        assert not hasattr(d, "lengths")


def test_remote_lengths_come_from_the_index_blocks_of_their_range(tmp_path, range_server):
    write_tokens(tmp_path / "t")
    url = range_server.url + "/t"
    size = (tmp_path / "t" / "index.bin").stat().st_size
    with Ragged.open(url, storage_options=HTTP_STORAGE_OPTIONS) as r:
        range_server.reset_counts()
        assert r.lengths().tolist() == LENGTHS
        assert r.lengths(4, 6).tolist() == LENGTHS[4:6]
        # Each call fetches the index block its range lies in (the whole index
        # here, one block), and no byte of a data file.
        assert range_server.log() == [("GET", "/t/index.bin", f"bytes=0-{size - 1}")] * 2
        assert np.from_dlpack(r[5].values).tolist() == list(range(70_000))
        assert [p for m, p, _ in range_server.log() if m == "GET" and "/data-" in p]
