"""loaderx.packing.to_dense and cu_seqlens: exact layouts of hand-made packed
batches, empty packs, cut records, and what they refuse."""

from __future__ import annotations

import numpy as np
import pytest

from loaderx.errors import InvalidArgumentError
from loaderx.packing import cu_seqlens, to_dense
from loaderx.sampler import PackingSampler, Sampler
from loaderx.zrecord import Ragged, RaggedBatch


def batch(*records: list[int], dtype=np.int32) -> RaggedBatch:
    return RaggedBatch.from_records([np.array(r, dtype=dtype) for r in records])


# Three packs of budget 5: [10 11 12][20 21], an empty pack, and [30..36] cut to 5.
THREE = batch([10, 11, 12], [20, 21], [30, 31, 32, 33, 34, 35, 36])
OFFSETS = np.array([0, 2, 2, 3], np.int64)


def test_to_dense_lays_out_each_pack_from_column_zero():
    out = to_dense(THREE, OFFSETS, 5, pad=-1)
    assert set(out) == {"tokens", "segment_ids", "positions"}
    assert out["tokens"].dtype == np.int32 and out["tokens"].shape == (3, 5)
    assert out["tokens"].tolist() == [
        [10, 11, 12, 20, 21],
        [-1, -1, -1, -1, -1],
        [30, 31, 32, 33, 34],
    ]
    assert out["segment_ids"].dtype == np.int32
    assert out["segment_ids"].tolist() == [[1, 1, 1, 2, 2], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert out["positions"].dtype == np.int32
    assert out["positions"].tolist() == [[0, 1, 2, 0, 1], [0, 0, 0, 0, 0], [0, 1, 2, 3, 4]]


def test_to_dense_pads_short_packs_and_keeps_empty_records():
    b = batch([1], [], [2, 3], [4], dtype=np.uint16)
    out = to_dense(b, [0, 3, 4], 6)
    assert out["tokens"].dtype == np.uint16
    assert out["tokens"].tolist() == [[1, 2, 3, 0, 0, 0], [4, 0, 0, 0, 0, 0]]
    # The empty record takes segment 2 and no token, so segments 1 and 3 are seen.
    assert out["segment_ids"].tolist() == [[1, 3, 3, 0, 0, 0], [1, 0, 0, 0, 0, 0]]
    assert out["positions"].tolist() == [[0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]]
    none = to_dense(batch([5]), [0, 0, 1], 2, pad=9)
    assert none["tokens"].tolist() == [[9, 9], [5, 9]]
    float_pad = to_dense(batch([1.5, 2.5], dtype=np.float32), [0, 1], 3, pad=0.25)
    assert float_pad["tokens"].tolist() == [[1.5, 2.5, 0.25]]


@pytest.mark.parametrize(
    ("dtype", "pad", "exc", "message"),
    [
        (
            np.uint8,
            1.5,
            InvalidArgumentError,
            "pad must be a value of the batch's dtype uint8, got 1.5",
        ),
        (np.uint8, float("nan"), InvalidArgumentError, "dtype uint8, got nan"),
        (
            np.uint8,
            -1,
            InvalidArgumentError,
            "pad must be a value of the batch's dtype uint8, got -1",
        ),
        (np.int8, 128, InvalidArgumentError, "dtype int8, got 128"),
        (np.float16, 1e10, InvalidArgumentError, "dtype float16, got 10000000000.0"),
        (np.int32, 2j, InvalidArgumentError, "dtype int32, got 2j"),
        (np.int32, True, InvalidArgumentError, "dtype int32, got True"),
        (np.uint8, None, TypeError, "pad must be a number, got NoneType"),
        (np.uint8, "0", TypeError, "pad must be a number, got str"),
    ],
)
def test_to_dense_refuses_a_pad_its_dtype_cannot_hold(dtype, pad, exc, message):
    # 1.5 was padded as 1 and nan as 0 in uint8; -1 raised NumPy's OverflowError.
    with pytest.raises(exc) as e:
        to_dense(batch([1, 2, 3], dtype=dtype), [0, 1], 5, pad=pad)
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("dtype", "pad", "padded"),
    [
        (np.uint8, 255, 255),
        (np.int8, -128, -128),
        (np.int64, 2.0, 2),
        (np.float32, float("inf"), float("inf")),
        (np.float32, 0.1, float(np.float32(0.1))),
        (np.bool_, True, True),
        (np.bool_, 0, False),
        (np.uint16, np.uint16(7), 7),
    ],
)
def test_to_dense_takes_a_pad_its_dtype_holds(dtype, pad, padded):
    out = to_dense(batch([1, 1], dtype=dtype), [0, 1], 3, pad=pad)
    assert out["tokens"].dtype == np.dtype(dtype)
    assert out["tokens"].tolist()[0][2] == padded


def test_cu_seqlens_gives_flat_tokens_and_pack_starts():
    out = cu_seqlens(THREE, OFFSETS, 5)
    assert set(out) == {"tokens", "cu_seqlens", "pack_starts"}
    assert out["tokens"].tolist() == [10, 11, 12, 20, 21, 30, 31, 32, 33, 34]
    assert out["cu_seqlens"].dtype == out["pack_starts"].dtype == np.int32
    assert out["cu_seqlens"].tolist() == [0, 3, 5, 10]
    assert out["pack_starts"].tolist() == [0, 5, 5, 10]
    # A cut in the middle of the batch moves the later records.
    mid = cu_seqlens(batch([1, 2, 3, 4], [5, 6]), [0, 1, 2], 2)
    assert mid["tokens"].tolist() == [1, 2, 5, 6]
    assert mid["cu_seqlens"].tolist() == [0, 2, 4]
    assert mid["pack_starts"].tolist() == [0, 2, 4]


def test_cu_seqlens_shares_the_values_when_nothing_is_cut():
    b = batch([1, 2], [3], [4, 5, 6])
    out = cu_seqlens(b, [0, 2, 3], 4)
    assert out["tokens"].tolist() == [1, 2, 3, 4, 5, 6]
    assert np.shares_memory(out["tokens"], np.from_dlpack(b.values))
    nothing = RaggedBatch(np.zeros(0, np.int32), np.zeros(1, np.int32), np.zeros((0, 1), np.uint64))
    empty = cu_seqlens(nothing, [0, 0], 4)
    assert empty["tokens"].tolist() == [] and empty["cu_seqlens"].tolist() == [0]
    assert empty["pack_starts"].tolist() == [0, 0]


def test_layouts_refuse_what_does_not_pack():
    over = r"pack 0 holds 6 tokens .* over tokens_per_pack \(5\)"
    with pytest.raises(InvalidArgumentError, match=over):
        to_dense(batch([1, 2, 3], [4, 5, 6]), [0, 2], 5)
    with pytest.raises(InvalidArgumentError, match="must rise from 0 to the batch's 2 records"):
        cu_seqlens(batch([1], [2]), [0, 1], 5)
    with pytest.raises(InvalidArgumentError, match="must rise from 0"):
        to_dense(batch([1], [2]), [0, 2, 1, 2], 5)
    with pytest.raises(InvalidArgumentError, match="one-dimensional integer array"):
        to_dense(batch([1]), [[0, 1]], 5)
    with pytest.raises(InvalidArgumentError, match="one-dimensional records"):
        to_dense(RaggedBatch.from_records([np.zeros((2, 2), np.int32)]), [0, 1], 5)
    with pytest.raises(TypeError, match="batch must be a RaggedBatch, got list"):
        cu_seqlens([1, 2], [0, 1], 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"tokens_per_pack must be in 1\.\."):
        to_dense(batch([1]), [0, 1], 0)
    with pytest.raises(TypeError, match="tokens_per_pack must be an integer, got float"):
        cu_seqlens(batch([1]), [0, 1], 2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", list(Sampler.Mode))
def test_a_sampler_step_lays_out_exactly(tmp_path, mode):
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 90, 500)
    lengths[::37] = 200  # cut to the budget
    records = [rng.integers(1, 50_000, n).astype(np.int32) for n in lengths]
    with Ragged.create(tmp_path / "t", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(records))
    store = Ragged.open(tmp_path / "t")
    s = PackingSampler(store.lengths(), 128, 6, mode, seed=2)
    for _ in range(5):
        positions = s.next()
        b = store.gather(positions)
        offsets = s.pack_offsets.copy()
        dense = to_dense(b, offsets, 128)
        flat = cu_seqlens(b, offsets, 128)
        cu, starts = flat["cu_seqlens"], flat["pack_starts"]
        for k in range(6):
            row = [records[p][:128] for p in positions[offsets[k] : offsets[k + 1]]]
            want = np.concatenate(row) if row else np.zeros(0, np.int32)
            assert dense["tokens"][k, : len(want)].tolist() == want.tolist()
            assert (dense["tokens"][k, len(want) :] == 0).all()
            assert (dense["segment_ids"][k, : len(want)] > 0).all()
            assert (dense["segment_ids"][k, len(want) :] == 0).all()
            assert flat["tokens"][starts[k] : starts[k + 1]].tolist() == want.tolist()
        seg_lengths = np.diff(cu)
        assert seg_lengths.tolist() == np.minimum(lengths[positions], 128).tolist()
    store.close()
