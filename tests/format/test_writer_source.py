"""What an append does with the caller's memory: it reads it, never changes it,
and what it publishes describes exactly the bytes it wrote, even while another
thread changes the source under it."""

import threading

import numpy as np
import pytest

from loaderx import _native
from loaderx.errors import InvalidArgumentError
from loaderx.zrecord import Dense, Ragged, RaggedBatch

REPEATS = 4


class Mutator:
    """Runs `step` in a loop on another thread until the block ends."""

    def __init__(self, step):
        self.step = step
        self.stop = threading.Event()
        self.steps = 0
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        while not self.stop.is_set():
            self.step(self.steps)
            self.steps += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def check_store(cls, path, n):
    with cls.open(path) as s:
        assert len(s) == n
        s.verify()
        s[:]  # every record decodes into a batch as well


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_dense_store_is_intact_when_the_source_changes_during_append(tmp_path, codec):
    n, size = 512, 1 << 16  # 32 MiB
    src = np.zeros((n, size), np.uint8)
    for r in range(REPEATS):
        with Mutator(lambda i: np.add(src, 1, out=src)) as m:
            with Dense.create(tmp_path / f"s{r}", np.uint8, (size,), codec=codec) as w:
                w.append(src)
        assert m.steps > 0
        check_store(Dense, tmp_path / f"s{r}", n)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_ragged_store_is_intact_when_the_values_change_during_append(tmp_path, codec):
    lengths = np.tile(np.array([1000, 1, 5000, 0, 3000], np.int64), 2000)  # 18e6 int32
    batch = RaggedBatch.from_records([np.zeros(k, np.int32) for k in lengths])
    values = np.from_dlpack(batch.values)
    for r in range(REPEATS):
        with Mutator(lambda i: np.add(values, 1, out=values)) as m:
            with Ragged.create(tmp_path / f"s{r}", np.int32, ndim=1, codec=codec) as w:
                w.append(batch)
        assert m.steps > 0
        check_store(Ragged, tmp_path / f"s{r}", len(lengths))


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_ragged_offsets_and_shapes_are_read_once(tmp_path, codec):
    # Another thread flips one offset between its true value and one far past the
    # values. Read once, the batch is either consistent (the store is published
    # intact) or not (the append is refused); it is never half of each.
    n = 200_000
    batch = RaggedBatch.from_records([np.full(1 + i % 7, i, np.int32) for i in range(n)])
    cu = np.from_dlpack(batch.cu_seqlens)
    shapes = np.from_dlpack(batch.shapes)
    k, good = n // 2, int(cu[n // 2])
    outcomes = {"published": 0, "refused": 0}
    for r in range(REPEATS * 2):

        def flip(i):
            cu[k] = good if i % 2 else 2**31 - 1
            shapes[k + 1, 0] = 1 + (k + 1) % 7 if i % 2 else 2**40

        path = tmp_path / f"s{r}"
        w = Ragged.create(path, np.int32, ndim=1, codec=codec)
        try:
            with Mutator(flip):
                w.append(batch)
        except InvalidArgumentError as e:
            assert "cu_seqlens" in str(e) or "shape" in str(e)
            outcomes["refused"] += 1
            w.abort()
            continue
        finally:
            cu[k], shapes[k + 1, 0] = good, 1 + (k + 1) % 7
        w.close()
        outcomes["published"] += 1
        check_store(Ragged, path, n)
        with Ragged.open(path) as rs:
            assert [t.shape for t in rs[k - 1, k, k + 1].to_tensors()] == [
                (1 + (k - 1) % 7,),
                (1 + k % 7,),
                (1 + (k + 1) % 7,),
            ]
    assert sum(outcomes.values()) == REPEATS * 2


def mapped_source(tmp_path, mode, n=64, size=1 << 16):
    data = np.random.default_rng(7).integers(0, 256, (n, size), np.uint8)
    np.save(tmp_path / "src.npy", data)
    return np.load(tmp_path / "src.npy", mmap_mode=mode), data


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("kind", ["memory", "read-only view", "mmap r", "mmap c", "mmap r+"])
def test_append_never_changes_its_input(tmp_path, codec, kind):
    n, size = 64, 1 << 16
    data = np.random.default_rng(7).integers(0, 256, (n, size), np.uint8)
    if kind == "memory":
        src = data.copy()
    elif kind == "read-only view":
        src = data.copy().view()
        src.flags.writeable = False
    else:
        src, _ = mapped_source(tmp_path, kind.split()[1])
        if kind != "mmap r":
            src[3] = 9  # dirty pages: private copies for "c", the file's for "r+"
            data[3] = 9
    with Dense.create(tmp_path / "s", np.uint8, (size,), codec=codec) as w:
        w.append(src)
    assert np.array_equal(src, data)
    with Dense.open(tmp_path / "s") as ds:
        assert np.array_equal(np.from_dlpack(ds[:]), data)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("kind", ["anonymous", "mmap c"])
def test_release_flag_on_memory_that_is_not_a_read_only_file_mapping(tmp_path, codec, kind):
    # The flag only promises; the writer drops pages only where it finds a
    # read-only shared file mapping itself.
    n, size = 64, 1 << 16
    if kind == "anonymous":
        src = np.random.default_rng(3).integers(0, 256, (n, size), np.uint8)
    else:
        src, _ = mapped_source(tmp_path, "c")
        src[:] = 5
    expected = src.copy()
    w = _native.Writer.create_dense(str(tmp_path / "d"), "uint8", [size], codec, 4)
    w.append_dense(src, n, True)
    w.close()
    assert np.array_equal(src, expected)
    with Dense.open(tmp_path / "d") as ds:
        assert np.array_equal(np.from_dlpack(ds[:]), expected)

    values = src.reshape(-1).view(np.int32)
    cu = np.arange(0, values.size + 1, size // 4, dtype=np.int32)
    shapes = np.full((n, 1), size // 4, np.uint64)
    w = _native.Writer.create_ragged(str(tmp_path / "r"), "int32", 1, codec, 4)
    w.append_ragged(values, cu, shapes, True)
    w.close()
    assert np.array_equal(src, expected)
    with Ragged.open(tmp_path / "r") as rs:
        assert np.array_equal(np.from_dlpack(rs[:].values), expected.reshape(-1).view(np.int32))
