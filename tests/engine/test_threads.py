"""The thread count set in code: loaderx.set_threads and loaderx.thread_count,
over LOADERX_NUM_THREADS, with gathers exact at every count."""

import os
import subprocess
import sys

import numpy as np
import pytest

import loaderx
from conftest import host
from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense


@pytest.fixture
def restore_threads():
    before = loaderx.thread_count()
    yield
    loaderx.set_threads(before)


def test_set_threads_changes_the_count_of_later_calls(tmp_path, restore_threads):
    data = np.arange(4000 * 16, dtype=np.int32).reshape(4000, 16)
    with Dense.create(tmp_path / "d", np.int32, (16,), codec="zstd", data_shards=3) as w:
        w.append(data)
    positions = np.random.default_rng(1).integers(0, 4000, 3000)
    with Dense.open(tmp_path / "d") as r:
        for n in (1, 3, 2, np.int64(5)):
            loaderx.set_threads(n)
            assert loaderx.thread_count() == n
            assert np.array_equal(host(r[positions]), data[positions])


def test_set_threads_refuses_what_is_no_thread_count(restore_threads):
    for n in (0, -1, 1025, 2**63, 2**70):  # the last two were an OverflowError
        with pytest.raises(InvalidArgumentError) as e:
            loaderx.set_threads(n)
        assert str(e.value) == f"the thread count must be in 1..=1024, got {n}"
    for n in (True, 2.0, "4", None):
        with pytest.raises(TypeError, match="the thread count must be an integer, got"):
            loaderx.set_threads(n)  # type: ignore[arg-type]


def test_the_environment_counts_until_set_in_code():
    code = (
        "import loaderx; print(loaderx.thread_count()); "
        "loaderx.set_threads(2); print(loaderx.thread_count())"
    )
    env = {**os.environ, "LOADERX_NUM_THREADS": "3"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["3", "2"]
