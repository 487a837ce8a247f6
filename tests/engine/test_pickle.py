"""Readers, allocators and samplers pickle by reference: a pickle names the store
(path, kind, checked option, header checksum), the binding and the configuration,
and unpickling reopens them, in this process or in a child started by spawn,
forkserver or fork. A store that changed at the path is refused, and so is
pickling a closed reader. Loaders do not pickle."""

import functools
import multiprocessing as mp
import os
import pickle
import shutil

import numpy as np
import pytest

from conftest import host
from loaderx.allocator import host as host_alloc
from loaderx.dataloader import Loader
from loaderx.errors import StoreNotFoundError, ZrecordError
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged, RaggedBatch

N = 200
DATA = np.arange(N * 4, dtype=np.int64).reshape(N, 4)
RECORDS = [np.arange(i % 7, dtype=np.int32) + 1000 * i for i in range(N)]
CHUNKS = [[0, 1, 2], [199, 5, 5], [17], list(range(100, 140))]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("pickle")
    with Dense.create(root / "dense", np.int64, (4,), codec="zstd") as w:
        w.append(DATA)
    with Ragged.create(root / "ragged", np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(RECORDS))
    return root


def ragged_lists(batch):
    return [host(t).tolist() for t in batch.to_tensors()]


# -- in this process ------------------------------------------------------------


@pytest.mark.parametrize("checked", [False, True])
def test_a_reader_reopens_the_same_store_with_its_options(root, checked):
    with Dense.open(root / "dense", checked=checked) as d, Ragged.open(root / "ragged") as r:
        d[0], r[0]  # their own host allocators exist now; they are not bindings
        d2, r2 = pickle.loads(pickle.dumps((d, r)))
        assert (type(d2), type(r2)) == (Dense, Ragged)
        assert (d2.path, r2.path) == (d.path, r.path)
        assert (d2.checked, r2.checked) == (checked, False)
        assert (d2.header_checksum, r2.header_checksum) == (d.header_checksum, r.header_checksum)
        assert host(d2[[5, 0, 199, 5]]).tolist() == DATA[[5, 0, 199, 5]].tolist()
        assert ragged_lists(r2[[6, 0, 13]]) == [RECORDS[i].tolist() for i in (6, 0, 13)]
        assert isinstance(d2.allocator, host_alloc.Allocator)
        assert d2.allocator is not d.allocator and r2.allocator is not d2.allocator
        d2.close(), r2.close()
        assert d2.allocator.closed  # a root reader's own allocator, closed with it
        assert not d.closed and host(d[1]).tolist() == DATA[1].tolist()


def test_a_bound_view_gets_a_fresh_host_allocator_of_the_same_configuration(root):
    a = host_alloc.Allocator(idle_limit=12345)
    with Dense.open(root / "dense") as d, Ragged.open(root / "ragged") as r:
        dv, rv = d.bind(a), r.bind(a)
        dv2, rv2, a2 = pickle.loads(pickle.dumps((dv, rv, a)))
    # One pickle, one allocator: views sharing an allocator share its copy.
    assert dv2.allocator is rv2.allocator is a2
    assert isinstance(a2, host_alloc.Allocator) and a2 is not a
    assert a2.idle_limit == 12345 and a2.stats() == (0, 0, 0)
    batch, tokens = dv2[[3, 1, 4]], rv2[[1, 5, 9]]
    assert a2.stats().live == 2 and a.stats().live == 0
    assert host(batch).tolist() == DATA[[3, 1, 4]].tolist()
    assert ragged_lists(tokens) == [RECORDS[i].tolist() for i in (1, 5, 9)]
    # A reopened view pickles again, although the reader it came from is closed.
    assert host(pickle.loads(pickle.dumps(dv2))[[7]]).tolist() == [DATA[7].tolist()]


def test_a_host_allocator_pickles_by_configuration():
    a = host_alloc.Allocator(idle_limit=777)
    kept = a.allocate(100)
    b = pickle.loads(pickle.dumps(a))
    assert type(b) is host_alloc.Allocator and b is not a
    assert b.idle_limit == 777 and b.stats().live == 0 and a.stats().live == 1
    assert host_alloc.Allocator().idle_limit == host_alloc.DEFAULT_IDLE_LIMIT
    del kept
    a.close()
    with pytest.raises(ValueError) as info:
        pickle.dumps(a)
    assert str(info.value) == "the allocator is closed; a closed allocator cannot be pickled"


def test_a_closed_reader_refuses_to_pickle(root):
    r = Ragged.open(root / "ragged")
    view = r.bind(host_alloc.Allocator())
    r.close()
    with pytest.raises(ValueError) as info:
        pickle.dumps(r)
    assert str(info.value) == (
        f"{root / 'ragged'}: the reader is closed; a closed reader cannot be pickled "
        "(unpickling would reopen a store this reader no longer reads)"
    )
    # The view is a reader of its own, still open.
    assert ragged_lists(pickle.loads(pickle.dumps(view))[[2]]) == [RECORDS[2].tolist()]


def _write_dense(path, data, codec="raw"):
    with Dense.create(path, np.int64, (4,), codec=codec) as w:
        w.append(data)


def test_a_store_that_changed_at_the_path_is_refused(tmp_path):
    path = tmp_path / "s"
    _write_dense(path, DATA)
    with Dense.open(path) as r:
        old = r.header_checksum
        blob = pickle.dumps(r)
    # The same records written again make the same store: it reopens.
    shutil.rmtree(path)
    _write_dense(path, DATA)
    assert host(pickle.loads(blob)[[9]]).tolist() == [DATA[9].tolist()]
    # One changed record is another store.
    shutil.rmtree(path)
    changed = DATA.copy()
    changed[150, 2] = -1
    _write_dense(path, changed)
    with Dense.open(path) as r:
        new = r.header_checksum
    assert new != old
    with pytest.raises(ZrecordError) as info:
        pickle.loads(blob)
    assert str(info.value) == (
        f"{path}: the store changed since the reader was pickled (header checksum "
        f"{new:#018x}, pickled {old:#018x}); a reader reopened from a pickle reads only "
        "the store it was pickled from"
    )
    assert info.value.path == str(path)
    # A store of the other kind, or none, at the path.
    shutil.rmtree(path)
    with Ragged.create(path, np.int32, ndim=1, codec="raw") as w:
        w.append(RaggedBatch.from_records(RECORDS))
    with pytest.raises(ZrecordError, match=r"is a Ragged store; open it with Ragged.open"):
        pickle.loads(blob)
    shutil.rmtree(path)
    with pytest.raises(StoreNotFoundError):
        pickle.loads(blob)


def test_a_relative_path_reopens_where_the_reader_opened_it(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    _write_dense("s", DATA)
    with Dense.open("s") as r:
        view = r.bind(host_alloc.Allocator())
    monkeypatch.chdir(tmp_path / "elsewhere")
    _write_dense("s", DATA + 1)  # another store of the same name, here
    blob = pickle.dumps(view)
    clone = pickle.loads(blob)
    assert clone.path == "s"
    assert host(clone[[0, 199]]).tolist() == DATA[[0, 199]].tolist()


def test_copies_are_reopened_readers(root):
    import copy

    with Dense.open(root / "dense") as d:
        for c in (copy.copy(d), copy.deepcopy(d)):
            assert c is not d and c._native is not d._native
            assert host(c[[42]]).tolist() == [DATA[42].tolist()]


def test_loaders_refuse_to_pickle(root):
    with Dense.open(root / "dense") as d:
        sampler = Sampler(N, 4, Sampler.Mode.SEQUENTIAL)
        with Loader({"x": [d]}, sampler, workers=0) as loader:
            with pytest.raises(TypeError) as info:
                pickle.dumps(loader)
            assert str(info.value) == (
                "a Loader cannot be pickled: its worker threads and batches belong to this "
                "process. Pickle its readers and sampler (they reopen by reference) and "
                "construct a Loader in the receiving process"
            )
            with pytest.raises(TypeError, match="a LoaderIterator cannot be pickled"):
                pickle.dumps(iter(loader))


# -- pickles of earlier versions -------------------------------------------------
# What readers pickled as before loaderx.zrecord became a package, spelled out in
# pickle protocol 2 opcodes: every version names the same module paths, so a
# pickle taken by one version reopens its store in another.


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _str(s: str) -> bytes:
    raw = s.encode()
    return b"X" + len(raw).to_bytes(4, "little") + raw


def _int(n: int) -> bytes:
    raw = n.to_bytes(9, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _reader_pickle(kind: str, path: str, checksum: int, tail: bytes) -> bytes:
    """A reader of `kind` at `path` (root: no binding), `tail` the pickled remote
    part (None for a local store)."""
    return (
        b"\x80\x02"
        + _global("loaderx.zrecord", "_reopen_reader")
        + b"("
        + _global("loaderx.zrecord", kind)
        + _str(path)
        + _str(path)
        + (b"\x88" if tail != b"N" else b"\x89")
        + _int(checksum)
        + b"N"
        + tail
        + b"tR."
    )


def _globals_named(data: bytes) -> set[tuple[str, str]]:
    import pickletools

    return {
        tuple(arg.split(" ", 1)) for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"
    }


def test_readers_pickled_by_earlier_versions_reopen(root, tmp_path):
    dense, ragged = str(root / "dense"), str(root / "ragged")
    with Dense.open(dense) as d, Ragged.open(ragged) as r:
        checksums = d.header_checksum, r.header_checksum
    d2 = pickle.loads(_reader_pickle("Dense", dense, checksums[0], b"N"))
    r2 = pickle.loads(_reader_pickle("Ragged", ragged, checksums[1], b"N"))
    assert (type(d2), d2.path, d2.checked) == (Dense, dense, False)
    assert host(d2[[7, 0]]).tolist() == DATA[[7, 0]].tolist()
    assert ragged_lists(r2[[6, 13]]) == [RECORDS[i].tolist() for i in (6, 13)]
    # A store URL, with the storage options as the strings earlier versions kept
    # and a Cache pickled by its fields.
    url = (root / "dense").as_uri()
    remote = (
        _global("loaderx.zrecord", "_Remote")
        + _str(url)
        + _str("retries")
        + _str("3")
        + b"\x86\x85"
        + _global("loaderx.zrecord", "Cache")
        + b")\x81}("
        + _str("path")
        + _str(str(tmp_path / "cache"))
        + _str("max_bytes")
        + _int(1 << 30)
        + _str("block_bytes")
        + _int(1 << 20)
        + b"ub\x87\x81"
    )
    u = pickle.loads(_reader_pickle("Dense", url, checksums[0], remote))
    assert (u.url, u.path) == (url, url)
    assert host(u[[3]]).tolist() == DATA[[3]].tolist()


def test_readers_pickle_by_the_module_paths_of_every_version(root, tmp_path):
    with Dense.open(root / "dense") as d, Ragged.open(root / "ragged") as r:
        assert _globals_named(pickle.dumps(d, protocol=2)) == {
            ("loaderx.zrecord", "_reopen_reader"),
            ("loaderx.zrecord", "Dense"),
        }
        assert _globals_named(pickle.dumps(r.bind(host_alloc.Allocator()), protocol=2)) == {
            ("loaderx.zrecord", "_reopen_reader"),
            ("loaderx.zrecord", "Ragged"),
            ("loaderx.allocator.host", "_reopen"),
        }
    url = (root / "dense").as_uri()
    with Dense.open(url, cache=tmp_path / "c") as u:
        assert _globals_named(pickle.dumps(u, protocol=2)) == {
            ("loaderx.zrecord", "_reopen_reader"),
            ("loaderx.zrecord", "Dense"),
            ("loaderx.zrecord", "_Remote"),
            ("loaderx.zrecord", "Cache"),
        }


# -- in child processes -----------------------------------------------------------

METHODS = [
    "spawn",
    "forkserver",
    pytest.param(
        "fork",
        marks=pytest.mark.filterwarnings(
            "ignore:This process .* is multi-threaded:DeprecationWarning"
        ),
    ),
]


def _dense_records(reader, positions):
    return os.getpid(), host(reader[positions]).copy()


def _ragged_records(reader, positions):
    return [host(t).copy() for t in reader[positions].to_tensors()]


def _describe(reader):
    a = reader.allocator
    return type(reader).__name__, reader.path, reader.checked, type(a).__module__, a.idle_limit


@pytest.mark.parametrize("method", METHODS)
def test_pool_map_over_positions_returns_exact_records(root, method):
    ctx = mp.get_context(method)
    with Dense.open(root / "dense", checked=True) as d, Ragged.open(root / "ragged") as r:
        host(d[CHUNKS[0]])  # the parent's gather threads are running at a fork
        view = r.bind(host_alloc.Allocator(idle_limit=4096))
        with ctx.Pool(2) as pool:
            # The readers travel with each task: pickled, reopened in the worker.
            dense = pool.map(functools.partial(_dense_records, d), CHUNKS)
            ragged = pool.map(functools.partial(_ragged_records, view), CHUNKS)
            described = pool.map(_describe, [d, view])
    assert all(pid != os.getpid() for pid, _ in dense)
    for chunk, (_, got) in zip(CHUNKS, dense, strict=True):
        assert got.tolist() == DATA[chunk].tolist()
    for chunk, got in zip(CHUNKS, ragged, strict=True):
        assert [g.tolist() for g in got] == [RECORDS[i].tolist() for i in chunk]
    default = host_alloc.DEFAULT_IDLE_LIMIT
    assert described == [
        ("Dense", str(root / "dense"), True, "loaderx.allocator.host", default),
        ("Ragged", str(root / "ragged"), False, "loaderx.allocator.host", 4096),
    ]


def _draw(sampler, steps):
    return [sampler.next().tolist() for _ in range(steps)]


@pytest.mark.parametrize("method", METHODS)
def test_a_pickled_sampler_continues_at_the_same_step_in_a_child(method):
    s = Sampler(N, 8, Sampler.Mode.CYCLIC, seed=3)
    for _ in range(30):  # into the second cycle
        s.next()
    with mp.get_context(method).Pool(1) as pool:
        got = pool.apply(_draw, (s, 5))
    assert got == _draw(s, 5)
    fresh = Sampler(N, 8, Sampler.Mode.CYCLIC, seed=3)
    fresh.seek(30)
    assert got == _draw(fresh, 5)


# -- torch ------------------------------------------------------------------------


class Records:
    """A map-style torch dataset over a reader (any object with __len__ and
    __getitem__ is one): an int gives one record, a list of positions a batch."""

    def __init__(self, reader):
        self.reader = reader

    def __len__(self):
        return len(self.reader)

    def __getitem__(self, idx):
        import torch

        return torch.from_dlpack(self.reader[idx])


# forkserver unpickles like spawn, and each worker's torch import takes seconds.
@pytest.mark.parametrize("context", [m for m in METHODS if m != "forkserver"])
def test_a_torch_dataloader_reads_exact_records_in_worker_processes(root, context):
    torch = pytest.importorskip("torch")
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    with Dense.open(root / "dense") as d:
        host(d[[0]])
        ds = Records(d)
        # Per batch: one gather each, positions from a batch sampler.
        batches = BatchSampler(SequentialSampler(range(N)), 32, drop_last=False)
        per_batch = DataLoader(
            ds, batch_size=None, sampler=batches, num_workers=2, multiprocessing_context=context
        )
        got = list(per_batch)
        assert [len(b) for b in got] == [32] * 6 + [8]
        assert torch.cat(got).dtype == torch.int64
        assert torch.cat(got).tolist() == DATA.tolist()
        if context != "fork":
            return  # each spawned worker imports torch again, which takes seconds
        # Per record, collated by torch.
        per_record = DataLoader(
            ds, batch_size=16, num_workers=2, multiprocessing_context=context, shuffle=False
        )
        assert torch.cat(list(per_record)).tolist() == DATA.tolist()
