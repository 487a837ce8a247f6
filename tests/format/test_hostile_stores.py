"""Stores crafted to break the reader: index entries whose arithmetic overflows,
schemas that claim huge records, files that are not regular files, damaged
payloads under checked reads, and files changed under an open reader.

Every crafted store has its checksums recomputed, so the damage reaches the code
past the checksum checks, where a wrong computation would panic or over-allocate.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xxhash
from fifo_unblock import Unblock

from loaderx.errors import LoaderxError
from loaderx.utils import train_dict
from loaderx.zrecord import Dense, Ragged, RaggedBatch, ZrecordError

INDEX_BLOCK = 64 << 10
ENTRY_FIXED = 24
# Byte offsets of version 2 header fields (docs/FORMAT.md).
OFF_INDEX_XXH3 = 40
OFF_SUMS_XXH3 = 64
OFF_SHAPE = 88


def xxh3(b: bytes) -> int:
    return xxhash.xxh3_64_intdigest(b)


def reseal(store) -> None:
    """Recomputes index.sum and every checksum in header.bin after the index or
    the header body was edited."""
    index = (store / "index.bin").read_bytes()
    sums = b"".join(
        struct.pack("<Q", xxh3(index[at : at + INDEX_BLOCK]))
        for at in range(0, len(index), INDEX_BLOCK)
    )
    (store / "index.sum").write_bytes(sums)
    head = bytearray((store / "header.bin").read_bytes()[:-8])
    struct.pack_into("<Q", head, OFF_INDEX_XXH3, xxh3(index))
    struct.pack_into("<Q", head, OFF_SUMS_XXH3, xxh3(sums))
    (store / "header.bin").write_bytes(bytes(head) + struct.pack("<Q", xxh3(bytes(head))))


def entry_size(store) -> int:
    return struct.unpack_from("<I", (store / "header.bin").read_bytes(), 20)[0]


def set_entry(store, i: int, *, offset: int | None = None, length: int | None = None) -> None:
    es = entry_size(store)
    index = bytearray((store / "index.bin").read_bytes())
    if offset is not None:
        struct.pack_into("<Q", index, i * es, offset)
    if length is not None:
        struct.pack_into("<I", index, i * es + 8, length)
    (store / "index.bin").write_bytes(bytes(index))
    reseal(store)


def make(tmp_path, kind: str, codec: str, record_bytes: int, n: int = 6):
    path = tmp_path / f"{kind}-{codec}-{record_bytes}"
    rng = np.random.default_rng(record_bytes)
    if kind == "dense":
        data = rng.integers(0, 255, size=(n, record_bytes), dtype=np.uint8)
        with Dense.create(path, np.uint8, (record_bytes,), codec=codec, data_shards=2) as w:
            w.append(data)
        return path, Dense, list(data)
    recs = [rng.integers(0, 255, size=record_bytes + k, dtype=np.uint8) for k in range(n)]
    with Ragged.create(path, np.uint8, ndim=1, codec=codec, data_shards=2) as w:
        w.append(RaggedBatch.from_records(recs))
    return path, Ragged, recs


def values(batch) -> np.ndarray:
    """The bytes of a gathered batch, Dense or Ragged, flattened."""
    if isinstance(batch, RaggedBatch):
        return np.from_dlpack(batch.values)
    return np.from_dlpack(batch).ravel()


CASES = [
    (kind, codec, size)
    for kind in ("dense", "ragged")
    for codec in ("raw", "zstd")
    for size in (48, 40_000)  # below and above the size read with pread
]


@pytest.mark.parametrize(("kind", "codec", "size"), CASES)
@pytest.mark.parametrize(
    "damage",
    [
        {"offset": 2**64 - 8},  # offset + length wraps around u64
        {"offset": 2**63},
        {"length": 2**32 - 1},
        {"offset": 2**64 - 1, "length": 2**32 - 1},
    ],
    ids=["wrapping-offset", "huge-offset", "huge-length", "both"],
)
def test_entries_whose_arithmetic_overflows_are_errors(tmp_path, kind, codec, size, damage):
    path, cls, records = make(tmp_path, kind, codec, size)
    set_entry(path, 3, **damage)
    with cls.open(path) as r:
        assert np.array_equal(values(r[[0, 5]]), np.concatenate([records[0], records[5]]))
        for key in (3, [0, 3], [3, 1, 2]):
            with pytest.raises(ZrecordError) as info:
                r[key]
            assert info.value.record == 3
            assert "index.bin" in str(info.value) and "record 3" in str(info.value)
        with pytest.raises(ZrecordError, match="record 3"):
            r.verify()


def test_the_cli_reports_a_damaged_entry_without_a_traceback(tmp_path):
    path, _, _ = make(tmp_path, "dense", "raw", 64)
    set_entry(path, 2, offset=2**64 - 8)
    out = subprocess.run(
        [sys.executable, "-m", "loaderx", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert "record 2" in out.stderr + out.stdout


def peak_rss_mib(code: str) -> float:
    """Peak resident memory of a fresh process running `code`. Read from VmHWM,
    which belongs to the process's own address space: ru_maxrss would also count
    the memory of the process that spawned it (the test runner) before the exec."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        with open("/proc/self/status") as f:
            hwm = next(line for line in f if line.startswith("VmHWM:"))
        print(int(hwm.split()[1]) / 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


def test_a_schema_claiming_huge_records_allocates_nothing_for_them(tmp_path):
    # A real 16-byte-record zstd store whose header is rewritten to claim records
    # of 2**31 bytes: the whole store is a few hundred bytes.
    path, _, _ = make(tmp_path, "dense", "zstd", 16, n=2)
    head = bytearray((path / "header.bin").read_bytes()[:-8])
    struct.pack_into("<Q", head, OFF_SHAPE, 2**31)
    (path / "header.bin").write_bytes(bytes(head) + struct.pack("<Q", xxh3(bytes(head))))
    assert sum(f.stat().st_size for f in path.iterdir()) < 1024
    with Dense.open(path) as r:
        assert r.item_shape == (2**31,)
        with pytest.raises(ZrecordError, match="record 0"):
            r[0]
        with pytest.raises(ZrecordError, match="record 0"):
            r.verify()
    rss = peak_rss_mib(
        f"""
        from loaderx.zrecord import Dense, ZrecordError
        with Dense.open({str(path)!r}) as r:
            for attempt in (lambda: r[0], lambda: r[[0, 1]], r.verify):
                try:
                    attempt()
                except ZrecordError:
                    pass
        """
    )
    assert rss < 300, f"peak RSS {rss:.0f} MiB"


def test_a_ragged_shape_over_the_record_limit_is_an_error(tmp_path):
    path, _, _ = make(tmp_path, "ragged", "zstd", 32, n=3)
    es = entry_size(path)
    index = bytearray((path / "index.bin").read_bytes())
    struct.pack_into("<Q", index, 1 * es + ENTRY_FIXED, 2**62)
    (path / "index.bin").write_bytes(bytes(index))
    reseal(path)
    with Ragged.open(path) as r:
        with pytest.raises(ZrecordError, match="record 1: its shape is out of range"):
            r[[0, 1]]
        assert np.from_dlpack(r[[0, 2]].cu_seqlens).tolist() == [0, 32, 66]


def test_an_oversized_header_is_refused_without_reading_it(tmp_path):
    path, _, _ = make(tmp_path, "dense", "raw", 16)
    with open(path / "header.bin", "r+b") as f:
        f.truncate(1 << 30)  # sparse: no disk used, but 1 GiB to read
    with pytest.raises(ZrecordError, match="header.bin: the header is 1073741824 bytes"):
        Dense.open(path)
    rss = peak_rss_mib(
        f"""
        from loaderx.zrecord import Dense, ZrecordError
        try:
            Dense.open({str(path)!r})
        except ZrecordError:
            pass
        """
    )
    assert rss < 200, f"peak RSS {rss:.0f} MiB"


def test_a_header_linked_to_a_device_is_refused(tmp_path):
    path, _, _ = make(tmp_path, "dense", "raw", 16)
    os.remove(path / "header.bin")
    os.symlink("/dev/zero", path / "header.bin")
    with pytest.raises(ZrecordError, match="header.bin: the header is not a regular file"):
        Dense.open(path)


@pytest.mark.parametrize("name", ["header.bin", "index.bin", "index.sum", "data-001.bin"])
def test_a_fifo_in_a_store_is_refused_at_once(tmp_path, name):
    path, _, _ = make(tmp_path, "dense", "raw", 16)
    os.remove(path / name)
    os.mkfifo(path / name)
    # In a child process: a regression blocks forever, which the timeout turns
    # into a failure instead of a hung suite.
    for argv in (
        ["-c", f"from loaderx.zrecord import Dense; Dense.open({str(path)!r})"],
        ["-m", "loaderx", "info", str(path)],
    ):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=30)
        assert out.returncode != 0
        assert f"{name}: " in out.stderr and "not a regular file" in out.stderr


def test_a_store_path_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "plain"
    f.write_bytes(b"x")
    with pytest.raises(ZrecordError, match="is not a directory"):
        Dense.open(f)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("size", [48, 40_000])
def test_checked_reads_catch_a_damaged_payload(tmp_path, codec, size):
    path, _, _ = make(tmp_path, "dense", codec, size)
    with Dense.open(path) as r:
        good = np.from_dlpack(r[:]).copy()
        es = entry_size(path)
        index = (path / "index.bin").read_bytes()
        offset, length, shard = struct.unpack_from("<QIB", index, 4 * es)
    data_file = path / f"data-{shard:03d}.bin"
    raw = bytearray(data_file.read_bytes())
    # Flip a byte near the end of the record: for zstd that is the last block's
    # content, so the frame may still decode (to wrong bytes) without a check.
    raw[offset + length - 2] ^= 0x01
    data_file.write_bytes(bytes(raw))
    with Dense.open(path, checked=True) as r:
        assert r.checked
        assert np.array_equal(np.from_dlpack(r[[0, 1, 2, 3]]), good[:4])
        with pytest.raises(ZrecordError, match="record 4: checksum mismatch") as info:
            r[[2, 4]]
        assert info.value.record == 4
        assert os.path.basename(info.value.path) == data_file.name
    with Dense.open(path) as r:
        assert not r.checked
        if codec == "raw":
            # Unchecked reads do not hash payloads: the damage is returned as data.
            got = np.from_dlpack(r[4])
            assert not np.array_equal(got, good[4])
        with pytest.raises(ZrecordError, match="record 4"):
            r.verify()


def test_checked_must_be_a_bool(tmp_path):
    path, _, _ = make(tmp_path, "dense", "raw", 16)
    with pytest.raises(TypeError, match="checked must be a bool"):
        Dense.open(path, checked=1)


def test_a_large_index_is_checked_block_by_block(tmp_path):
    # 60k records of 24-byte entries: a 1.4 MiB index, over the size checked
    # whole at open.
    n = 60_000
    data = np.arange(n, dtype=np.uint32).reshape(n, 1)
    path = tmp_path / "big"
    with Dense.create(path, np.uint32, (1,), codec="raw") as w:
        w.append(data)
    index = bytearray((path / "index.bin").read_bytes())
    assert len(index) == n * ENTRY_FIXED > (1 << 20)
    damaged_block = 15
    index[damaged_block * INDEX_BLOCK + 5] ^= 0x20
    (path / "index.bin").write_bytes(bytes(index))
    # Only the index changed: its block checksum no longer matches, and neither
    # does the whole-index checksum that verify() reads.
    with Dense.open(path) as r:
        first = INDEX_BLOCK * damaged_block // ENTRY_FIXED
        assert np.from_dlpack(r[[0, 1, n - 1]]).ravel().tolist() == [0, 1, n - 1]
        with pytest.raises(ZrecordError, match=f"index block {damaged_block} checksum mismatch"):
            r[first + 1]
        with pytest.raises(ZrecordError, match="index checksum mismatch"):
            r.verify()


def test_errors_share_one_base_and_keep_their_standard_classes(tmp_path):
    path, _, _ = make(tmp_path, "dense", "raw", 16)
    with Dense.open(path) as r:
        with pytest.raises(IndexError) as info:
            r[len(r)]
        assert isinstance(info.value, LoaderxError)
    with pytest.raises(FileExistsError) as info:
        Dense.create(path, np.uint8, (16,), codec="raw")
    assert isinstance(info.value, LoaderxError)
    with pytest.raises(FileNotFoundError) as info:
        Dense.open(tmp_path / "absent")
    assert isinstance(info.value, LoaderxError)


def test_a_file_truncated_under_an_open_reader_is_reported_by_verify(tmp_path):
    path, _, _ = make(tmp_path, "dense", "raw", 4096, n=64)
    code = f"""
        import os
        from loaderx.zrecord import Dense, ZrecordError
        r = Dense.open({str(path)!r})
        os.truncate({str(path / "data-000.bin")!r}, 0)
        try:
            r.verify()
        except ZrecordError as e:
            print("refused:", e)
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "data-000.bin: changed size while open" in out.stdout


@pytest.mark.parametrize("name", ["dict.bin", "attrs.json"])
def test_a_fifo_for_the_dictionary_or_the_attributes_is_refused_at_once(tmp_path, name):
    rng = np.random.default_rng(1)
    records = rng.integers(0, 8, (400, 64)).astype(np.uint8)
    d = train_dict(records, size=1024)
    with Dense.create(
        tmp_path / "s", np.uint8, (64,), codec="zstd_dict", dict_bytes=d, attrs={"a": 1}
    ) as w:
        w.append(records)
    victim = tmp_path / "s" / name
    victim.unlink()
    os.mkfifo(victim)
    with Unblock(victim) as u, pytest.raises(ZrecordError) as e:
        Dense.open(tmp_path / "s")
    assert not u.unblocked and u.elapsed < 5
    assert str(e.value).startswith(f"{victim}: the ") and "is not a regular file" in str(e.value)
