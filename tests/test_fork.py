"""Readers survive fork(): a child (a PyTorch DataLoader worker, say) keeps using a
reader opened, and already gathered from, in the parent."""

import multiprocessing as mp

import numpy as np
import pytest

from loaderx.zrecord import Dense

DATA = np.arange(4000 * 256, dtype=np.int64).reshape(4000, 256)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_gather_in_forked_children(tmp_path, codec):
    with Dense.create(tmp_path / "s", np.int64, (256,), codec=codec) as w:
        w.append(DATA)
    store = Dense.open(tmp_path / "s")
    big = np.arange(0, 4000, 3)
    assert np.array_equal(np.from_dlpack(store[big]), DATA[big])  # parent's pool is running
    ctx = mp.get_context("fork")
    globals()["_STORE"] = store
    with ctx.Pool(2) as pool:
        outs = pool.map(_gather_global, [big, big[::-1], np.array([5, 5, 3999])])
    assert np.array_equal(outs[0], DATA[big])
    assert np.array_equal(outs[1], DATA[big[::-1]])
    assert np.array_equal(outs[2], DATA[[5, 5, 3999]])
    assert np.array_equal(np.from_dlpack(store[big]), DATA[big])  # parent still fine
    store.close()


def _gather_global(idx):
    return np.from_dlpack(globals()["_STORE"][idx]).copy()
