"""Storage backends a user might pick instead of loaderx, behind one small interface.

Every adapter persists records from the same prepared source and, in one call,
returns a batch of positions in the form a training step consumes:

- Ragged sources (``RaggedSource``: flat values + element offsets + uint64 shapes)
  come back packed: ``(values, cu_seqlens, shapes)`` with int32 ``cu_seqlens``
  (n + 1, starting at 0) and ``shapes`` uint64 (n, ndim);
- Dense sources (one ``(n, *item_shape)`` ndarray) come back stacked as one
  ``(len(idx), *item_shape)`` ndarray.

The life of an adapter: ``prepare(src)`` (untimed setup: a writer, a dictionary),
``write(src)`` (the timed write of the complete source, including the backend's own
commit), ``open()``, ``gather(idx)`` (the timed read), ``disk_bytes()``, ``close()``.
A store written earlier is reopened with ``set_layout(src)`` then ``open()``.

Third-party modules are imported inside the methods that use them, so this file
loads anywhere NumPy does (the published loaderx's venv has nothing else) and a
missing package surfaces as ImportError from ``prepare`` or ``write``. Packing list
results (one buffer per record) into the common form happens inside ``gather``:
that copy is part of what those backends cost.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from pathlib import Path

import numpy as np

# Rows per Arrow record batch / Parquet row group for the compressed columnar peers:
# enough records for about this many logical bytes (at least one record). Their
# codecs compress whole buffers of a batch or page, so a random record costs a
# decompression of its group; small groups keep that read amplification down.
GROUP_BYTES = 64 * 1024


class RaggedSource:
    """Variable-shape records as three arrays: ``values`` (every element end to end,
    usually a memory map), ``offsets`` (n + 1 element offsets) and ``shapes``
    (n x ndim uint64)."""

    def __init__(self, values: np.ndarray, offsets: np.ndarray, shapes: np.ndarray) -> None:
        self.values = values
        self.offsets = offsets
        self.shapes = shapes
        self.n = len(shapes)
        self.ndim = shapes.shape[1]
        self.dtype = values.dtype
        self._flat = np.asarray(values)  # an ndarray view: cheaper slices than np.memmap
        self._ends = np.asarray(offsets).astype(np.int64)

    @classmethod
    def load(cls, values: str | Path, offsets: str | Path, shapes: str | Path) -> RaggedSource:
        """Memory-maps the three .npy files; values beyond the last offset are ignored
        (a prefix of the records is a valid source without copying the values)."""
        off = np.load(offsets, mmap_mode="r")
        vals = np.load(values, mmap_mode="r")[: int(off[-1])]
        return cls(vals, off, np.load(shapes, mmap_mode="r"))

    @classmethod
    def from_dense(cls, array: np.ndarray) -> RaggedSource:
        """A view of fixed-shape records as ragged ones (no copy of the values)."""
        n, shape = len(array), array.shape[1:]
        size = int(np.prod(shape))
        offsets = np.arange(n + 1, dtype=np.int64) * size
        shapes = np.broadcast_to(np.array(shape, dtype=np.uint64), (n, len(shape)))
        return cls(np.asarray(array).reshape(-1), offsets, np.ascontiguousarray(shapes))

    @property
    def payload_bytes(self) -> int:
        return int(self._ends[-1] - self._ends[0]) * self.dtype.itemsize

    def record(self, i: int) -> np.ndarray:
        return self._flat[self._ends[i] : self._ends[i + 1]].reshape(self.shapes[i])

    def records(self):
        """Every record as an ndarray view of its shape, in order."""
        ends = self._ends.tolist()
        for i, shape in enumerate(np.asarray(self.shapes).tolist()):
            yield self._flat[ends[i] : ends[i + 1]].reshape(shape)

    def pack(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """values, cu_seqlens, shapes of the records at `idx`, concatenating one
        slice per record (faster than an element-wise fancy index for large
        records, and on par for small ones)."""
        starts = self._ends[idx]
        ends = self._ends[idx + 1]
        flat = self._flat
        values = np.concatenate(
            [flat[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        )
        cu = np.zeros(len(idx) + 1, dtype=np.int32)
        np.cumsum(ends - starts, out=cu[1:])
        return values, cu, np.asarray(self.shapes)[idx]

    def payload(self, idx: np.ndarray) -> int:
        """Logical bytes of the records at `idx`."""
        return int((self._ends[idx + 1] - self._ends[idx]).sum()) * self.dtype.itemsize


def _pack_buffers(bufs: list, ndim: int, dtype: np.dtype):
    """Packs records stored as bytes, each ``shape (ndim x uint64) + payload``."""
    head = 8 * ndim
    sizes = np.fromiter((len(b) - head for b in bufs), dtype=np.int64, count=len(bufs))
    ends = np.cumsum(sizes)
    values = np.empty(int(ends[-1]) if len(bufs) else 0, dtype=np.uint8)
    shapes = np.empty((len(bufs), ndim), dtype=np.uint64)
    out, meta = memoryview(values), memoryview(shapes.view(np.uint8).reshape(-1))
    at = 0
    for k, (b, end) in enumerate(zip(bufs, ends.tolist(), strict=True)):
        meta[k * head : (k + 1) * head] = b[:head]
        out[at:end] = b[head:]
        at = end
    cu = np.zeros(len(bufs) + 1, dtype=np.int32)
    np.floor_divide(ends, dtype.itemsize, out=cu[1:], casting="unsafe")
    return values.view(dtype), cu, shapes


def _record_bytes(src: RaggedSource, i: int, flat_bytes: np.ndarray) -> bytes:
    item = src.dtype.itemsize
    a, b = int(src._ends[i]) * item, int(src._ends[i + 1]) * item
    return np.asarray(src.shapes[i]).tobytes() + flat_bytes[a:b].tobytes()


def _arrow_table(src: RaggedSource, binary: bool = False):
    """The source as an Arrow table without copying the values: payload as
    ``list<T>`` (typed) or ``large_binary`` (bytes per record), shape as
    ``fixed_size_list<uint64>[ndim]``."""
    import pyarrow as pa

    values = np.asarray(src.values)
    if binary:
        offsets = src._ends * src.dtype.itemsize
        payload = pa.Array.from_buffers(
            pa.large_binary(), src.n, [None, pa.py_buffer(offsets), pa.py_buffer(values)]
        )
    else:
        payload = pa.ListArray.from_arrays(
            pa.array(src._ends.astype(np.int32)), pa.array(values.reshape(-1))
        )
    shapes = pa.FixedSizeListArray.from_arrays(
        pa.array(np.asarray(src.shapes).reshape(-1)), src.ndim
    )
    return pa.table({"values": payload, "shape": shapes})


def _pack_table(t, ndim: int, dtype: np.dtype):
    """Packs an Arrow table of (``list<T>`` or ``large_binary`` payload, shape)."""
    import pyarrow as pa

    payload = t.column(0).combine_chunks()
    shapes = t.column(1).combine_chunks().flatten().to_numpy().reshape(-1, ndim)
    if pa.types.is_large_binary(payload.type):
        buf = payload.buffers()
        o = np.frombuffer(buf[1], np.int64, len(payload) + 1, payload.offset * 8)
        values = np.frombuffer(buf[2], np.uint8, int(o[-1] - o[0]), int(o[0])).view(dtype)
        cu = ((o - o[0]) // dtype.itemsize).astype(np.int32)
    else:
        offsets = payload.offsets.to_numpy()
        cu = offsets - offsets[0] if offsets[0] else offsets
        values = payload.flatten().to_numpy()
    return values, cu, shapes


def _group_rows(src: RaggedSource) -> int:
    """Records per group for about GROUP_BYTES of logical payload."""
    return max(1, round(GROUP_BYTES * src.n / max(1, src.payload_bytes)))


def _remap(idx: np.ndarray, starts: np.ndarray):
    """Groups holding `idx` (sorted, unique) and the rows of `idx` in the
    concatenation of those groups, given each group's first row `starts`."""
    g = np.searchsorted(starts, idx, side="right") - 1
    groups, inverse = np.unique(g, return_inverse=True)
    sizes = starts[groups + 1] - starts[groups]
    base = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return groups, base[inverse] + (idx - starts[g])


class Peer:
    """Common behaviour: dense sources go through the ragged path (records of one
    shape) and come back reshaped; subclasses with a native fixed-shape layout
    override ``_write_dense`` / ``_gather_dense``."""

    module = ""  # the distribution whose version is reported
    codecs: tuple[str, ...] = ("raw",)

    def __init__(self, path: str | Path, codec: str = "raw") -> None:
        if codec not in self.codecs:
            raise ValueError(f"{type(self).__name__} has no codec {codec!r}")
        self.path = Path(path)
        self.codec = codec
        self.item_shape: tuple[int, ...] | None = None  # set for dense sources
        self.ndim = 0
        self.dtype = np.dtype("uint8")

    def version(self) -> str:
        return f"{self.module} {importlib.metadata.version(self.module)}"

    def set_layout(self, src) -> None:
        """Records the source's kind, dtype and ndim; enough to ``open`` a store
        written earlier from the same source."""
        if isinstance(src, np.ndarray):
            self.item_shape = tuple(src.shape[1:])
            self.ndim, self.dtype = len(self.item_shape), src.dtype
        else:
            self.ndim, self.dtype = src.ndim, src.dtype

    def prepare(self, src) -> None:
        """Untimed setup before ``write``."""
        self.set_layout(src)

    def write(self, src) -> None:
        if isinstance(src, np.ndarray):
            self._write_dense(src)
        else:
            self._write(src)

    def _write_dense(self, array: np.ndarray) -> None:
        self._write(RaggedSource.from_dense(array))

    def open(self) -> None:
        raise NotImplementedError

    def gather(self, idx: np.ndarray):
        if self.item_shape is None:
            return self._gather(idx)
        return self._gather_dense(idx)

    def _gather_dense(self, idx: np.ndarray) -> np.ndarray:
        return self._gather(idx)[0].reshape(len(idx), *self.item_shape)

    def disk_bytes(self) -> int:
        """Allocated bytes of the store (a file, or every file under a folder)."""
        p = self.path
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        return sum(f.stat().st_blocks * 512 for f in files)

    def close(self) -> None:
        pass

    def remove(self) -> None:
        self.close()
        if self.path.is_dir():
            shutil.rmtree(self.path, ignore_errors=True)
        elif self.path.exists():
            self.path.unlink()


class NpyMmap(Peer):
    """``.npy`` files read through ``np.load(mmap_mode='r')``: values, offsets and
    shapes for ragged records (packed with one slice per record), or the stacked
    array itself for dense ones (``arr[idx]``)."""

    module = "numpy"

    def _write(self, src: RaggedSource) -> None:
        self.path.mkdir()
        np.save(self.path / "values.npy", src.values)
        np.save(self.path / "offsets.npy", src._ends)
        np.save(self.path / "shapes.npy", np.asarray(src.shapes))

    def _write_dense(self, array: np.ndarray) -> None:
        self.path.mkdir()
        np.save(self.path / "array.npy", array)

    def open(self) -> None:
        if self.item_shape is None:
            f = [self.path / f"{k}.npy" for k in ("values", "offsets", "shapes")]
            self._src = RaggedSource.load(*f)
            self._gather = self._src.pack
        else:
            self._array = np.load(self.path / "array.npy", mmap_mode="r")

    def _gather_dense(self, idx: np.ndarray) -> np.ndarray:
        return self._array[idx]


class Lmdb(Peer):
    """LMDB (py-lmdb), one key per record: big-endian position -> shape (uint64 x
    ndim) + payload bytes. Reads use zero-copy buffers of one read transaction and
    copy each record into the packed output."""

    module = "lmdb"

    def _write(self, src: RaggedSource) -> None:
        import lmdb

        size = 2 * src.payload_bytes + 16 * src.n * (src.ndim + 8) + (1 << 30)
        env = lmdb.open(str(self.path), map_size=size, max_dbs=0)
        flat = np.asarray(src.values).reshape(-1).view(np.uint8)
        with env.begin(write=True) as txn:
            for i in range(src.n):
                txn.put(i.to_bytes(8, "big"), _record_bytes(src, i, flat), append=True)
        env.close()

    def open(self) -> None:
        import lmdb

        self._env = lmdb.open(str(self.path), readonly=True, lock=False, readahead=False)
        self._txn = self._env.begin(buffers=True)
        self._keys = [i.to_bytes(8, "big") for i in range(self._env.stat()["entries"])]

    def _gather(self, idx: np.ndarray):
        get, keys = self._txn.get, self._keys
        return _pack_buffers([get(keys[i]) for i in idx.tolist()], self.ndim, self.dtype)

    def close(self) -> None:
        if getattr(self, "_env", None) is not None:
            self._txn.abort()
            self._env.close()
            self._env = None


class Hdf5(Peer):
    """HDF5 (h5py), in the two layouts HDF5 users pick for variable records.

    - ``vlen`` (ragged only): one variable-length dataset ``values`` (each element
      a flattened record, kept in HDF5's global heap; HDF5 filters cannot compress
      those) plus an (n, ndim) uint64 ``shape`` dataset. A gather reads both with
      h5py's fancy indexing, which needs sorted unique positions, then restores
      the order and concatenates.
    - ``raw`` / ``gzip``: one record per chunk. Ragged: one dataset per record under
      the group ``r`` (name = position) in the record's own shape, contiguous for
      ``raw``, a single gzip chunk (level 4, h5py's default) for ``gzip``; a gather
      looks each dataset up by name and ``read_direct``s it into the packed output.
      Dense: one (n, *item_shape) dataset chunked one record per chunk; a gather
      ``read_direct``s each record into the stacked output (h5py's fancy indexing
      over the batch's chunks is far slower on image records)."""

    module = "h5py"
    codecs = ("vlen", "raw", "gzip")

    def _options(self, shape: tuple[int, ...]) -> dict:
        return {"chunks": shape, "compression": "gzip"} if self.codec == "gzip" else {}

    def _write(self, src: RaggedSource) -> None:
        import h5py

        with h5py.File(self.path, "w") as f:
            if self.codec == "vlen":
                records = np.empty(src.n, dtype=object)
                records[:] = [r.reshape(-1) for r in src.records()]
                f.create_dataset("values", data=records, dtype=h5py.vlen_dtype(src.dtype))
                f.create_dataset("shape", data=np.asarray(src.shapes))
                return
            group = f.create_group("r")
            for i, rec in enumerate(src.records()):
                group.create_dataset(str(i), data=rec, **self._options(rec.shape))

    def _write_dense(self, array: np.ndarray) -> None:
        import h5py

        if self.codec == "vlen":
            raise ValueError("the vlen layout is for ragged records")
        with h5py.File(self.path, "w") as f:
            chunk = (1, *array.shape[1:])
            f.create_dataset("d", data=array, **{"chunks": chunk, **self._options(chunk)})

    def open(self) -> None:
        import h5py

        self._file = h5py.File(self.path, "r")
        if self.item_shape is not None:
            self._dense = self._file["d"]
        elif self.codec == "vlen":
            self._values, self._shape = self._file["values"], self._file["shape"]
        else:
            self._group = self._file["r"]
            self._names = [str(i) for i in range(len(self._group))]

    def _gather(self, idx: np.ndarray):
        if self.codec == "vlen":
            uniq, inverse = np.unique(idx, return_inverse=True)
            parts = self._values[uniq][inverse]
            shapes = self._shape[uniq][inverse]
            cu = np.zeros(len(idx) + 1, dtype=np.int32)
            np.cumsum([len(p) for p in parts], out=cu[1:])
            return np.concatenate(parts).astype(self.dtype, copy=False), cu, shapes
        group, names = self._group, self._names
        datasets = [group[names[i]] for i in idx.tolist()]
        shapes = np.array([d.shape for d in datasets], dtype=np.uint64).reshape(-1, self.ndim)
        cu = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(np.prod(shapes, axis=1, dtype=np.int64), out=cu[1:])
        values = np.empty(int(cu[-1]), dtype=self.dtype)
        bounds = zip(cu[:-1].tolist(), cu[1:].tolist(), shapes.tolist(), strict=True)
        for d, (a, b, shape) in zip(datasets, bounds, strict=True):
            if b > a:
                d.read_direct(values[a:b].reshape(shape))
        return values, cu.astype(np.int32), shapes

    def _gather_dense(self, idx: np.ndarray) -> np.ndarray:
        d = self._dense
        out = np.empty((len(idx), *self.item_shape), dtype=self.dtype)
        for k, i in enumerate(idx.tolist()):
            d.read_direct(out, np.s_[i], np.s_[k])
        return out

    def close(self) -> None:
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._file = None


class ArrowIpc(Peer):
    """An Arrow IPC file (pyarrow), memory-mapped; payload ``list<T>``, shape
    ``fixed_size_list<uint64>[ndim]``.

    - ``raw``: one uncompressed record batch, read zero-copy with ``read_all`` and
      gathered with ``Table.take``;
    - ``zstd``: record batches of about GROUP_BYTES with IPC zstd buffer
      compression; a gather decompresses each record batch it touches
      (``get_batch``), then ``take``s from them;
    - ``raw-binary``: as ``raw`` with a ``large_binary`` payload, which ``take``
      copies per record rather than per element (faster, but untyped)."""

    module = "pyarrow"
    codecs = ("raw", "zstd", "raw-binary")

    def _write(self, src: RaggedSource) -> None:
        import pyarrow as pa

        t = _arrow_table(src, binary=self.codec == "raw-binary")
        options = pa.ipc.IpcWriteOptions(compression="zstd" if self.codec == "zstd" else None)
        rows = _group_rows(src) if self.codec == "zstd" else None
        with (
            pa.OSFile(str(self.path), "wb") as f,
            pa.ipc.new_file(f, t.schema, options=options) as w,
        ):
            w.write_table(t, max_chunksize=rows)

    def open(self) -> None:
        import pyarrow as pa

        self._reader = pa.ipc.open_file(pa.memory_map(str(self.path)))
        if self.codec == "zstd":
            rows = [
                self._reader.get_batch(i).num_rows for i in range(self._reader.num_record_batches)
            ]
            self._starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        else:
            self._table = self._reader.read_all()

    def _gather(self, idx: np.ndarray):
        import pyarrow as pa

        if self.codec != "zstd":
            return _pack_table(self._table.take(idx), self.ndim, self.dtype)
        groups, rows = _remap(idx, self._starts)
        batches = [self._reader.get_batch(int(g)) for g in groups]
        # One chunk before take: take across many chunks is slower.
        t = pa.Table.from_batches(batches).combine_chunks().take(rows)
        return _pack_table(t, self.ndim, self.dtype)

    def close(self) -> None:
        self._reader = self._table = None


class Parquet(Peer):
    """A Parquet file (pyarrow) with zstd, row groups of about GROUP_BYTES, other
    options at pyarrow's defaults; payload and shape columns as in ArrowIpc. A
    gather reads the row groups it touches (``read_row_groups``, memory-mapped) and
    ``take``s from them."""

    module = "pyarrow"
    codecs = ("zstd",)

    def _write(self, src: RaggedSource) -> None:
        import pyarrow.parquet as pq

        pq.write_table(
            _arrow_table(src), str(self.path), compression="zstd", row_group_size=_group_rows(src)
        )

    def open(self) -> None:
        import pyarrow.parquet as pq

        self._file = pq.ParquetFile(str(self.path), memory_map=True)
        meta = self._file.metadata
        rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self._starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)

    def _gather(self, idx: np.ndarray):
        groups, rows = _remap(idx, self._starts)
        t = self._file.read_row_groups(groups.tolist()).take(rows)
        return _pack_table(t, self.ndim, self.dtype)

    def close(self) -> None:
        self._file = None


class ArrayRecord(Peer):
    """ArrayRecord (``array-record``), ``group_size:1`` (its setting for random
    access: one record per compressed chunk), uncompressed (``raw``) or
    ``zstd:3``; records are shape (uint64 x ndim) + payload bytes, read with
    ``ArrayRecordReader.read(positions)`` and copied into the packed output."""

    module = "array-record"
    codecs = ("raw", "zstd")

    def _write(self, src: RaggedSource) -> None:
        from array_record.python.array_record_module import ArrayRecordWriter

        codec = "uncompressed" if self.codec == "raw" else "zstd:3"
        w = ArrayRecordWriter(str(self.path), f"group_size:1,{codec}")
        flat = np.asarray(src.values).reshape(-1).view(np.uint8)
        for i in range(src.n):
            w.write(_record_bytes(src, i, flat))
        w.close()

    def open(self) -> None:
        from array_record.python.array_record_module import ArrayRecordReader

        self._reader = ArrayRecordReader(str(self.path), "readahead_buffer_size:0")

    def _gather(self, idx: np.ndarray):
        return _pack_buffers(self._reader.read(idx.tolist()), self.ndim, self.dtype)

    def close(self) -> None:
        if getattr(self, "_reader", None) is not None:
            self._reader.close()
            self._reader = None


class Lance(Peer):
    """A Lance dataset (``pylance``) written with ``lance.write_dataset`` at its
    defaults (file format 2.2, which picks its own encodings: token ids come out
    bit-packed; its ``lance-encoding:compression`` field option changed nothing
    here), payload and shape columns as in ArrowIpc, gathered with
    ``LanceDataset.take``."""

    module = "pylance"

    def _write(self, src: RaggedSource) -> None:
        import lance

        lance.write_dataset(_arrow_table(src), str(self.path))

    def open(self) -> None:
        import lance

        self._ds = lance.dataset(str(self.path))

    def _gather(self, idx: np.ndarray):
        return _pack_table(self._ds.take(idx), self.ndim, self.dtype)

    def close(self) -> None:
        self._ds = None


class Loaderx(Peer):
    """A loaderx store of whichever loaderx the interpreter imports (this checkout,
    or the published release in its own venv): written in one ``append`` of the
    whole source, read with ``store[idx]`` and consumed with ``np.from_dlpack``.
    ``zstd_dict`` trains its dictionary with ``loaderx.utils.train_dict`` on the
    same records in ``prepare`` (timed separately: ``train_s``, ``dict_size``)."""

    module = "loaderx"
    codecs = ("raw", "zstd", "zstd_dict")

    def prepare(self, src) -> None:
        import time

        from loaderx.zrecord import Dense, Ragged

        super().prepare(src)
        extra = {}
        self.train_s = self.dict_size = None
        if self.codec == "zstd_dict":
            from loaderx.utils import train_dict

            records = iter(src) if self.item_shape is not None else src.records()
            start = time.perf_counter()
            extra["dict_bytes"] = train_dict(records)
            self.train_s = time.perf_counter() - start
            self.dict_size = len(extra["dict_bytes"])
        if self.item_shape is None:
            self._writer = Ragged.create(
                str(self.path), src.dtype, ndim=src.ndim, codec=self.codec, **extra
            )
        else:
            self._writer = Dense.create(
                str(self.path), src.dtype, self.item_shape, codec=self.codec, **extra
            )

    def write(self, src) -> None:
        if self.item_shape is None:
            from loaderx.zrecord import RaggedBatch

            cu = np.asarray(src.offsets)
            if cu.dtype != np.int32:
                cu = cu.astype(np.int32)
            self._writer.append(RaggedBatch(src.values, cu, src.shapes))
        else:
            self._writer.append(src)
        self._writer.close()

    def open(self) -> None:
        from loaderx.zrecord import Dense, Ragged

        self._store = (Ragged if self.item_shape is None else Dense).open(str(self.path))

    def _gather(self, idx: np.ndarray):
        b = self._store[idx]
        return np.from_dlpack(b.values), np.from_dlpack(b.cu_seqlens), np.from_dlpack(b.shapes)

    def _gather_dense(self, idx: np.ndarray) -> np.ndarray:
        return np.from_dlpack(self._store[idx])

    def close(self) -> None:
        if getattr(self, "_store", None) is not None:
            self._store.close()
            self._store = None


PEERS: dict[str, type[Peer]] = {
    "npy": NpyMmap,
    "lmdb": Lmdb,
    "hdf5": Hdf5,
    "arrow-ipc": ArrowIpc,
    "parquet": Parquet,
    "arrayrecord": ArrayRecord,
    "lance": Lance,
    "loaderx": Loaderx,
}


def make(backend: str, path: str | os.PathLike[str], codec: str = "raw") -> Peer:
    """The adapter for `backend` (a key of PEERS) storing at `path`."""
    return PEERS[backend](Path(path), codec)
