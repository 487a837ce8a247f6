"""The allocator contract, the host allocator, and reader binding."""

import gc

import numpy as np
import pytest

from conftest import host
from loaderx.allocator import Allocation, Allocator
from loaderx.allocator import host as host_alloc
from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense, Ragged, RaggedBatch


@pytest.fixture
def dense(tmp_path):
    data = np.arange(200 * 16, dtype=np.int32).reshape(200, 16)
    with Dense.create(tmp_path / "d", np.int32, (16,), codec="zstd") as w:
        w.append(data)
    with Dense.open(tmp_path / "d") as ds:
        yield ds, data


def test_allocate_exact_aligned_exclusive():
    a = host_alloc.Allocator()
    assert isinstance(a, Allocator)
    regions = [a.allocate(n) for n in (1, 100, 4096, 1 << 20)]
    assert all(isinstance(r, Allocation) for r in regions)
    assert [r.size for r in regions] == [1, 100, 4096, 1 << 20]
    assert all(r.address % 64 == 0 and r.device == (1, 0) for r in regions)
    assert len({r.address for r in regions}) == 4
    assert a.stats().live == 4
    addr = regions[1].address
    del regions[1]
    assert a.stats().live == 3
    assert a.allocate(100).address == addr  # released regions are reused
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        a.allocate(-1)
    for huge in (2**64 - 1, 11 * 2**60, 2**64, 2**70):  # sizes no allocation can have
        with pytest.raises(ValueError, match="too large"):
            a.allocate(huge)
    a.close()


def test_bind_places_outputs_in_the_allocator(dense):
    ds, data = dense
    a = host_alloc.Allocator()
    view = ds.bind(a)
    assert isinstance(view, Dense) and view.allocator is a and ds.allocator is not a
    b = view[[5, 1, 5]]
    assert np.array_equal(host(b), data[[5, 1, 5]])
    assert a.stats().live == 1
    one = view[3]
    assert one.shape == (16,) and a.stats().live == 2
    del b, one
    gc.collect()
    assert a.stats().live == 0
    with pytest.raises(TypeError, match="loaderx.allocator.Allocator"):
        ds.bind(object())


def test_a_root_reader_reads_into_its_own_host_allocator(dense, tmp_path):
    _, data = dense
    with Dense.create(tmp_path / "s", data.dtype, data.shape[1:], codec="raw") as w:
        w.append(data)
    ds = Dense.open(tmp_path / "s")
    batch = ds[[2, 0]]
    own = ds.allocator
    assert isinstance(own, host_alloc.Allocator) and ds.allocator is own
    assert own.stats().live == 1
    view = ds.bind(host_alloc.Allocator())
    kept = view[[1]]
    assert own.stats().live == 1 and view.allocator.stats().live == 1
    ds.close()
    assert own.closed and not view.allocator.closed
    assert np.array_equal(host(batch), data[[2, 0]])  # closing frees nothing in use
    assert np.array_equal(host(view[[3]]), data[[3]])
    del kept


def test_a_view_on_the_allocator_its_reader_closed_says_so(dense, tmp_path):
    _, data = dense
    with Dense.create(tmp_path / "s", data.dtype, data.shape[1:], codec="raw") as w:
        w.append(data)
    ds = Dense.open(tmp_path / "s")
    view = ds.bind(ds.allocator)
    ds.close()
    for read in (lambda: view[0], lambda: view[[1, 2]], lambda: next(iter(view))):
        with pytest.raises(InvalidArgumentError) as info:
            read()
        # Was "the allocator is closed", with no word of which or why.
        assert str(info.value) == (
            f"{tmp_path / 's'}: the host allocator it writes into was closed with the reader "
            f"of {tmp_path / 's'} that created it; bind views to an allocator of your own to "
            "read after closing that reader"
        )
    mine = host_alloc.Allocator()
    other = Dense.open(tmp_path / "s").bind(mine)
    mine.close()
    with pytest.raises(InvalidArgumentError) as info:
        other[0]
    assert str(info.value) == f"{tmp_path / 's'}: the allocator it writes into is closed"


REFUSED = (
    r"cannot subclass a loaderx allocator: readers gather only into loaderx's own "
    r"allocators \(host, cuda, amdgpu\), filling their native pools directly, so a "
    r"subclass's methods would never see a read$"
)


def test_allocators_cannot_be_defined_outside_loaderx():
    with pytest.raises(TypeError, match="^Mine " + REFUSED):

        class Mine(Allocator):
            def allocate(self, nbytes):
                raise AssertionError("never called")

            def close(self):
                pass

            @property
            def closed(self):
                return False

    # A subclass of a concrete allocator would look like one, yet reads would
    # never call its methods either.
    with pytest.raises(TypeError, match="^Logged " + REFUSED):

        class Logged(host_alloc.Allocator):
            def allocate(self, nbytes):
                print("allocate", nbytes)
                return super().allocate(nbytes)


def test_live_regions_are_never_handed_out_twice(dense):
    ds, data = dense
    a = host_alloc.Allocator()
    view = ds.bind(a)
    rng = np.random.default_rng(0)
    held = []
    for _ in range(200):
        idx = rng.integers(0, len(data), 32)
        held.append((idx, view[idx]))
        if rng.random() < 0.3:  # release some, so the pool has regions to reuse
            held.pop(int(rng.integers(0, len(held))))
    assert a.stats().live == len(held)
    addresses = [host(t).__array_interface__["data"][0] for _, t in held]
    assert len(set(addresses)) == len(held)
    for idx, t in held:
        assert np.array_equal(host(t), data[idx])


def test_dlpack_consumers_keep_the_region_alive(dense):
    ds, data = dense
    a = host_alloc.Allocator()
    t = ds.bind(a)[[7, 8]]
    arr = np.from_dlpack(t)
    del t
    gc.collect()
    assert a.stats().live == 1  # the NumPy array still uses it
    assert np.array_equal(arr, data[[7, 8]])
    del arr
    gc.collect()
    assert a.stats().live == 0


def test_close_with_live_allocations_frees_nothing_in_use(dense):
    ds, data = dense
    a = host_alloc.Allocator()
    view = ds.bind(a)
    live = view[[1, 2, 3]]
    released = view[[4]]
    del released
    assert a.stats().idle_bytes > 0
    a.close()
    assert a.closed and a.stats().idle_bytes == 0 and a.stats().live == 1
    assert np.array_equal(host(live), data[[1, 2, 3]])  # still valid
    with pytest.raises(ValueError, match="closed"):
        view[[0]]
    with pytest.raises(ValueError, match="closed"):
        a.allocate(8)
    del live
    gc.collect()
    assert a.stats().live == 0


def test_ragged_batches_hold_one_allocation(tmp_path):
    recs = [np.arange(k, dtype=np.float32) for k in (3, 0, 5)]
    with Ragged.create(tmp_path / "r", np.float32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(recs))
    a = host_alloc.Allocator()
    with Ragged.open(tmp_path / "r") as rs:
        b = rs.bind(a)[[2, 0]]
        assert a.stats().live == 1
        views = b.to_tensors()
        del b
        gc.collect()
        assert a.stats().live == 1  # the views keep it
        assert [host(v).tolist() for v in views] == [recs[2].tolist(), recs[0].tolist()]
        del views
        gc.collect()
        assert a.stats().live == 0


def test_idle_limit_bounds_pooled_memory():
    a = host_alloc.Allocator(idle_limit=1 << 20)
    regions = [a.allocate(300_000) for _ in range(8)]
    del regions
    assert a.stats().idle_bytes <= 1 << 20
