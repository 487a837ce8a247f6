"""Ragged store and RaggedBatch: round trips, memory sharing, validation."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import host
from loaderx.zrecord import DLTensor, Ragged, RaggedBatch

DTYPES = [
    np.bool_,
    np.int8,
    np.uint16,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]


def records_of(rng, dtype, shapes):
    out = []
    for shape in shapes:
        a = rng.standard_normal(shape) * 100
        if np.dtype(dtype).kind == "c":
            a = a + 1j * a[::-1] if a.ndim else a
        out.append(np.ascontiguousarray(a.astype(dtype)))
    return out


def unpack(batch):
    return [host(t) for t in batch.to_tensors()]


def same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def build(path, recs, codec="raw", shards=4, ndim=None):
    ndim = recs[0].ndim if ndim is None else ndim
    with Ragged.create(path, recs[0].dtype, ndim=ndim, codec=codec, data_shards=shards) as w:
        w.append(RaggedBatch.from_records(recs))
    return Ragged.open(path)


@st.composite
def ragged_case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(1, 4))
    n = draw(st.integers(1, 40))
    dim = st.integers(0, 5)
    shapes = [tuple(draw(dim) for _ in range(ndim)) for _ in range(n)]
    picks = draw(st.lists(st.integers(0, n - 1), max_size=60))
    codec = draw(st.sampled_from(["raw", "zstd"]))
    shards = draw(st.sampled_from([1, 3, 255]))
    seed = draw(st.integers(0, 2**32 - 1))
    return dtype, shapes, picks, codec, shards, seed


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=ragged_case())
def test_property_every_gather_equals_the_source(tmp_path_factory, case):
    dtype, shapes, picks, codec, shards, seed = case
    recs = records_of(np.random.default_rng(seed), dtype, shapes)
    with build(tmp_path_factory.mktemp("r") / "s", recs, codec, shards) as rs:
        assert len(rs) == len(recs)
        batch = rs[picks]
        assert len(batch) == len(picks)
        same(unpack(batch), [recs[i] for i in picks])
        cu = host(batch.cu_seqlens)
        assert cu.dtype == np.int32 and cu[0] == 0
        assert cu.tolist() == np.cumsum([0] + [recs[i].size for i in picks]).tolist()
        assert host(batch.shapes).tolist() == [list(recs[i].shape) for i in picks]
        same(unpack(rs[:]), recs)


def test_zero_element_records_are_kept_exactly(tmp_path):
    recs = [np.zeros((0, 4), np.float32), np.ones((2, 4), np.float32), np.zeros((3, 0), np.float32)]
    with build(tmp_path / "s", recs, "zstd") as rs:
        one = rs[0]
        assert host(one.shapes).tolist() == [[0, 4]]
        assert host(one.cu_seqlens).tolist() == [0, 0]
        same(unpack(rs[2, 0, 1]), [recs[2], recs[0], recs[1]])


def test_integer_index_is_a_one_record_batch(tmp_path):
    recs = [np.arange(n, dtype=np.int32) for n in (3, 1, 4, 1, 5)]
    with build(tmp_path / "s", recs) as rs:
        b = rs[2]
        assert isinstance(b, RaggedBatch)
        assert len(b) == 1 and b.shapes.shape == (1, 1)
        assert host(b.values).tolist() == [0, 1, 2, 3]
        b = rs[0, 2, 4]
        assert host(b.values).tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4]
        assert host(b.cu_seqlens).tolist() == [0, 3, 7, 12]
        assert host(b.shapes).dtype == np.uint64
        empty = rs[[]]
        assert len(empty) == 0 and host(empty.cu_seqlens).tolist() == [0]
        assert empty.values.shape == (0,) and empty.shapes.shape == (0, 1)
        same(unpack(rs[::2]), recs[::2])
        same([host(t) for b in rs for t in b.to_tensors()], recs)
        with pytest.raises(IndexError):
            rs[5]
        with pytest.raises(IndexError):
            rs[[0, -1]]


def test_batch_fields_share_one_allocation_and_views_share_memory(tmp_path):
    recs = [np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(4, dtype=np.int64).reshape(1, 4)]
    with build(tmp_path / "s", recs) as rs:
        b = rs[0, 1]
        values, cu, shapes = host(b.values), host(b.cu_seqlens), host(b.shapes)
        base = values.__array_interface__["data"][0]
        assert base % 64 == 0
        assert cu.__array_interface__["data"][0] % 64 == 0
        assert shapes.__array_interface__["data"][0] % 64 == 0
        assert base < cu.__array_interface__["data"][0] < shapes.__array_interface__["data"][0]
        views = b.to_tensors()
        assert all(isinstance(v, DLTensor) for v in views)
        assert [v.shape for v in views] == [(2, 3), (1, 4)]
        first = host(views[0])
        assert np.shares_memory(first, values)
        first[1, 2] = -1
        assert values[5] == -1
        assert np.shares_memory(host(b.values), values)


def test_user_batches_share_memory_with_their_arrays():
    values = np.arange(5, dtype=np.float32)
    b = RaggedBatch(values, np.array([0, 2, 5], np.int32), np.array([[2], [3]], np.uint64))
    assert np.shares_memory(host(b.values), values)
    t = host(b.to_tensors()[1])
    values[4] = 40
    assert t.tolist() == [2, 3, 40]
    frozen = values.copy()
    frozen.flags.writeable = False
    rb = RaggedBatch(frozen, np.array([0, 5], np.int32), np.array([[5]], np.uint64))
    assert not host(rb.values).flags.writeable


def test_read_batch_is_an_append_input(tmp_path):
    recs = records_of(np.random.default_rng(3), np.int16, [(2, 3), (0, 3), (5, 1)])
    with (
        build(tmp_path / "a", recs, "zstd") as src,
        Ragged.create(tmp_path / "b", src.dtype, ndim=src.ndim, codec="raw") as dst,
    ):
        dst.append(src[:])
        dst.append(src[2, 0])
    with Ragged.open(tmp_path / "b") as rs:
        same(unpack(rs[:]), recs + [recs[2], recs[0]])


def test_constructor_validation_names_the_problem():
    v = np.arange(5, dtype=np.int32)
    ok_cu, ok_shapes = np.array([0, 2, 5], np.int32), np.array([[2], [3]], np.uint64)
    RaggedBatch(v, ok_cu, ok_shapes)
    cases = [
        ((v, ok_cu.astype(np.int64), ok_shapes), ValueError, "cu_seqlens must be a 1-D int32"),
        ((v, ok_cu, ok_shapes.astype(np.int64)), ValueError, "shapes must be a 2-D uint64"),
        ((v.reshape(5, 1), ok_cu, ok_shapes), ValueError, "values must be one-dimensional"),
        ((v, np.array([1, 2, 5], np.int32), ok_shapes), ValueError, "must start at 0"),
        ((v, np.array([0, 3, 5], np.int32), ok_shapes), ValueError, "record 0 has shape"),
        (
            (v, np.array([0, 2, 4], np.int32), np.array([[2], [2]], np.uint64)),
            ValueError,
            "values holds 5 elements but cu_seqlens ends at 4",
        ),
        ((v, np.array([0, 2], np.int32), ok_shapes), ValueError, "n \\+ 1"),
        (
            (v, np.array([0, 4, 2, 5], np.int32), np.array([[4], [0], [3]], np.uint64)),
            ValueError,
            "decreases at record 1",
        ),
        (([0, 1], ok_cu, ok_shapes), TypeError, "does not coerce"),
    ]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            RaggedBatch(*args)


def test_from_records_validation():
    with pytest.raises(ValueError, match="record 1 has dtype int64"):
        RaggedBatch.from_records([np.zeros(2, np.int32), np.zeros(2, np.int64)])
    with pytest.raises(ValueError, match="record 1 has ndim 2"):
        RaggedBatch.from_records([np.zeros(2, np.int32), np.zeros((2, 1), np.int32)])
    with pytest.raises(ValueError, match="0-dimensional"):
        RaggedBatch.from_records([np.array(3, dtype=np.int32)])
    with pytest.raises(TypeError, match="record 0 is a list"):
        RaggedBatch.from_records([[1, 2]])
    with pytest.raises(ValueError, match="at least one record"):
        RaggedBatch.from_records([])
    gen = (np.arange(k, dtype=np.uint8) for k in range(4))
    b = RaggedBatch.from_records(gen)
    assert len(b) == 4 and host(b.cu_seqlens).tolist() == [0, 0, 1, 3, 6]


def test_an_empty_batch_is_built_from_empty_arrays(tmp_path):
    empty = RaggedBatch(np.empty(0, np.int32), np.zeros(1, np.int32), np.empty((0, 1), np.uint64))
    assert len(empty) == 0 and empty.to_tensors() == []
    with Ragged.create(tmp_path / "r", np.int32, ndim=1, codec="raw") as w:
        w.append(empty)
        w.append(RaggedBatch.from_records([np.arange(3, dtype=np.int32)]))
    with Ragged.open(tmp_path / "r") as rs:
        assert len(rs) == 1 and host(rs[0].values).tolist() == [0, 1, 2]


def test_append_refuses_wrong_batches(tmp_path):
    with Ragged.create(tmp_path / "s", np.int32, ndim=1, codec="raw") as w:
        with pytest.raises(TypeError, match="takes a RaggedBatch"):
            w.append([np.zeros(2, np.int32)])
        with pytest.raises(ValueError, match="expected dtype int32, got int64"):
            w.append(RaggedBatch.from_records([np.zeros(2, np.int64)]))
        with pytest.raises(ValueError, match="expected records of ndim 1, got ndim 2"):
            w.append(RaggedBatch.from_records([np.zeros((2, 2), np.int32)]))


def test_from_arrow_shares_values_and_handles_slices():
    pa = pytest.importorskip("pyarrow")
    arr = pa.array([[1, 2], [3], [], [4, 5, 6]], type=pa.list_(pa.int32()))
    b = RaggedBatch.from_arrow(arr)
    assert host(b.cu_seqlens).tolist() == [0, 2, 3, 3, 6]
    assert host(b.shapes).tolist() == [[2], [1], [0], [3]]
    flat = arr.flatten().to_numpy()
    assert np.shares_memory(host(b.values), flat)
    s = RaggedBatch.from_arrow(arr.slice(1, 3))
    assert [host(t).tolist() for t in s.to_tensors()] == [[3], [], [4, 5, 6]]
    large = pa.array([[1.5], [2.5, 3.5]], type=pa.large_list(pa.float64()))
    lb = RaggedBatch.from_arrow(large)
    assert host(lb.cu_seqlens).dtype == np.int32
    assert [host(t).tolist() for t in lb.to_tensors()] == [[1.5], [2.5, 3.5]]
    with pytest.raises(ValueError, match="nulls"):
        RaggedBatch.from_arrow(pa.array([[1], None], type=pa.list_(pa.int32())))
    with pytest.raises(TypeError, match="ListArray"):
        RaggedBatch.from_arrow(pa.array([1, 2]))


def test_ragged_errors(tmp_path):
    with pytest.raises(ValueError, match="Dense with item_shape"):
        Ragged.create(tmp_path / "s", np.int32, ndim=0, codec="raw")
    with pytest.raises(TypeError):
        Ragged.create(tmp_path / "s", np.int32, codec="raw")  # ndim is required


def test_batch_past_int32_offsets_is_an_error_not_a_wrap(tmp_path):
    n = 1_200_000_000  # two of these exceed int32 offsets
    values = np.zeros(n, np.uint8)  # untouched pages: cheap to hold and to compress
    b = RaggedBatch(values, np.array([0, n], np.int32), np.array([[n]], np.uint64))
    with Ragged.create(tmp_path / "s", np.uint8, ndim=1, codec="zstd") as w:
        w.append(b)
    with Ragged.open(tmp_path / "s") as rs:
        with pytest.raises(ValueError, match="more than int32 cu_seqlens can address"):
            rs[[0, 0]]
