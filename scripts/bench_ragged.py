"""Random batch gather of variable-shape records, against record-store peers.

Every backend persists each record's payload plus its exact shape and, inside one
timed call, turns a batch of positions into the same compute-ready packed form:
``values`` (all elements laid end to end), ``cu_seqlens`` (n + 1 int32 element
offsets) and ``shapes`` (n x ndim uint64). loaderx returns exactly that as a
RaggedBatch (consumed here with ``np.from_dlpack``); the others build it:

- ``npy-mmap``: ``np.load(mmap_mode='r')`` of the flat values plus an offsets and a
  shapes array, packed by one fancy-indexing gather;
- ``lmdb``: one key per record, value = shape (uint64 x ndim) + payload bytes,
  copied into a fresh packed output;
- ``arrow-ipc``: a memory-mapped Arrow IPC file with a ``list<T>`` payload column
  and a ``fixed_size_list<uint64>`` shape column, gathered with ``Table.take``;
  ``arrow-ipc binary`` stores the payload as ``large_binary`` instead, which
  ``take`` copies per record rather than per element (much faster, untyped);
- ``loaderx <codec>``: ``rs[idx]`` on a store of this checkout (raw, zstd,
  zstd_dict with a dictionary from ``loaderx.utils.train_dict``), and raw again
  with ``LOADERX_NUM_THREADS=1`` to show what splitting a batch across threads
  gains or costs;
- ``loaderx 2.8.6 <codec>``: the same calls on the published release in its own
  venv (``--peer-python``, default ``.venv-peer``).

Writes: every backend starts from the same prepared source (memory-mapped .npy
values, int32 offsets and uint64 shapes) and writes it completely, loaderx in one
``append`` of a RaggedBatch built from those arrays. Write time covers adaptation,
writing and publishing (each backend's own close/commit), not writer setup or
dictionary training, which is reported separately.

Gathers: each backend runs in a fresh worker process. It first verifies
batches with repeated positions and the first and last record against the source
(dtype, values, cu_seqlens and shapes, exactly), then warms up on the page cache
(the files are read once, then a few batches), then times fresh uniform IID
batches of 256 positions until they sum to >= 2 s (``--quick``: 0.3 s on a
tenth of the records). All backends see the same index sequence. Drawing the
positions and dropping the result are outside the timed span.

The data are synthetic, generated deterministically, shaped like the spec's
workloads; real corpora (WikiText-103 tokens, Oxford-IIIT Pet images) come in a
later issue:

- tokens: 200,000 int32 records, lengths log-normal (median ~130) clipped to
  16..512, ids from a Zipf law over a shuffled 50,257-id vocabulary with a third
  of the stream made of recurring "phrases" (so compressors find repeats);
- images: 300 uint8 (3, H, W) records, H and W uniform in 100..700, smooth
  colour fields with +-1 pixel noise.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _bench_common import (
    GIB,
    MIB,
    disk_bytes,
    emit,
    machine,
    p95,
    peer_python,
    run_worker,
    table,
    time_calls,
)

BATCH = 256
SEED = 20240607
VOCAB = 50257
# verify: correctness batches before timing (an images batch holds most records).
WORKLOADS = {
    "tokens": {"n": 200_000, "quick_n": 20_000, "verify": 100, "quick_verify": 10},
    "images": {"n": 300, "quick_n": 40, "verify": 5, "quick_verify": 2},
}
CODECS = ("raw", "zstd", "zstd_dict")
WARM_BATCHES = 20  # at most; warm-up also stops after the timed span's length


# ---- synthetic sources ------------------------------------------------------------


def _zipf(rng: np.random.Generator, count: int, size: int, a: float) -> np.ndarray:
    """`count` ranks in 0..size-1 drawn with probability proportional to 1/(rank+1)^a."""
    weights = 1.0 / np.arange(1, size + 1) ** a
    cdf = np.cumsum(weights) / weights.sum()
    return np.minimum(np.searchsorted(cdf, rng.random(count)), size - 1)


def make_tokens(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, lengths) of `n` token records.

    The stream is a sequence of units: a single Zipf(1.1) id (two thirds) or one of
    5,000 recurring phrases of 2..8 ids (one third), itself picked by a Zipf(1.0)
    law. Records cut the stream at log-normal lengths (median 130, sigma 0.75)
    clipped to 16..512."""
    vocab = np.random.default_rng(SEED).permutation(VOCAB).astype(np.int32)
    lengths = np.clip(np.rint(rng.lognormal(np.log(130), 0.75, n)), 16, 512).astype(np.int64)
    total = int(lengths.sum())
    phrase_len = rng.integers(2, 9, 5000)
    phrases = vocab[_zipf(rng, int(phrase_len.sum()), VOCAB, 1.1)]
    phrase_at = np.cumsum(phrase_len) - phrase_len
    units = total // 2 + 64  # a unit holds 2.33 ids on average: enough for `total`
    singles = vocab[_zipf(rng, units, VOCAB, 1.1)]
    pick = _zipf(rng, units, len(phrase_len), 1.0)
    is_phrase = rng.random(units) < 1 / 3
    # Expand the units into one stream: unit u copies ulen[u] ids of `pool` from ustart[u].
    pool = np.concatenate([phrases, singles])
    ustart = np.where(is_phrase, phrase_at[pick], len(phrases) + np.arange(units))
    ulen = np.where(is_phrase, phrase_len[pick], 1)
    out_at = np.cumsum(ulen) - ulen
    stream = pool[np.repeat(ustart - out_at, ulen) + np.arange(int(ulen.sum()))]
    assert len(stream) >= total
    return stream[:total], lengths


def _upsample(low: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear enlargement of (c, gh, gw) to (c, h, w)."""
    gy, gx = low.shape[1] - 1, low.shape[2] - 1
    y = np.linspace(0, gy, h, dtype=np.float32)
    x = np.linspace(0, gx, w, dtype=np.float32)
    y0 = np.minimum(y.astype(np.int64), gy - 1)
    x0 = np.minimum(x.astype(np.int64), gx - 1)
    ty, tx = (y - y0)[:, None], (x - x0)[None, :]
    rows = low[:, y0] * (1 - ty[None]) + low[:, y0 + 1] * ty[None]
    return rows[:, :, x0] * (1 - tx[None]) + rows[:, :, x0 + 1] * tx[None]


def make_images(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """`n` uint8 (3, H, W) smooth colour fields with +-1 pixel noise."""
    out = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(100, 701, 2))
        low = rng.random((3, h // 48 + 2, w // 48 + 2), dtype=np.float32) * 255
        pixels = _upsample(low, h, w) + rng.integers(-1, 2, (3, h, w))
        out.append(np.clip(pixels, 0, 255).astype(np.uint8))
    return out


def make_source(root: Path, name: str, n: int) -> dict:
    """Writes workload `name` as values.npy, offsets.npy (int32, n + 1) and
    shapes.npy (uint64, n x ndim) under `root`; returns its description."""
    rng = np.random.default_rng(SEED + (name == "images"))
    if name == "tokens":
        values, lengths = make_tokens(rng, n)
        shapes = lengths.astype(np.uint64).reshape(-1, 1)
    else:
        records = make_images(rng, n)
        values = np.concatenate([r.reshape(-1) for r in records])
        shapes = np.array([r.shape for r in records], dtype=np.uint64)
        lengths = np.prod(shapes, axis=1).astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("the workload overflows int32 offsets")
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / "values.npy", values)
    np.save(root / "offsets.npy", offsets.astype(np.int32))
    np.save(root / "shapes.npy", shapes)
    return {
        "n": n,
        "dtype": str(values.dtype),
        "ndim": shapes.shape[1],
        "payload": int(values.nbytes),
        "lengths": lengths,
        "shapes": shapes,
    }


class Source:
    """The prepared source, memory-mapped, and the reference packing of a batch."""

    def __init__(self, root: str | Path) -> None:
        root = Path(root)
        self.files = [root / f for f in ("values.npy", "offsets.npy", "shapes.npy")]
        self.values = np.load(self.files[0], mmap_mode="r")
        self.offsets = np.load(self.files[1], mmap_mode="r")
        self.shapes = np.load(self.files[2], mmap_mode="r")
        self.n = len(self.shapes)
        self.ndim = self.shapes.shape[1]
        self.dtype = self.values.dtype
        self._flat = np.asarray(self.values)  # an ndarray view: cheaper slices than memmap

    def records(self):
        """Every record as an ndarray view of its shape, in order."""
        offsets = np.asarray(self.offsets).tolist()
        for i, shape in enumerate(np.asarray(self.shapes).tolist()):
            yield self._flat[offsets[i] : offsets[i + 1]].reshape(shape)

    def pack(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """values, cu_seqlens, shapes of the records at `idx`, concatenating one
        slice per record (faster than an element-wise fancy index for large
        records, and on par for small ones)."""
        starts = self.offsets[idx]
        ends = self.offsets[idx + 1]
        flat = self._flat
        values = np.concatenate(
            [flat[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        )
        cu = np.zeros(len(idx) + 1, dtype=np.int32)
        np.cumsum(ends - starts, out=cu[1:])
        return values, cu, self.shapes[idx]

    def payload(self, idx: np.ndarray) -> int:
        return int((self.offsets[idx + 1] - self.offsets[idx]).sum()) * self.dtype.itemsize


# ---- backends: write(src, path) and open(src, path) -> gather(idx) ----------------


def _npy_write(src: Source, path: Path) -> None:
    path.mkdir()
    for f in src.files:
        np.save(path / f.name, np.load(f, mmap_mode="r"))


def _npy_open(src: Source, path: Path):
    return Source(path).pack


def _lmdb_key(i: int) -> bytes:
    return i.to_bytes(8, "big")


def _lmdb_write(src: Source, path: Path) -> None:
    import lmdb

    env = lmdb.open(str(path), map_size=4 * src.values.nbytes + (1 << 30), max_dbs=0)
    with env.begin(write=True) as txn:
        flat = np.asarray(src.values).view(np.uint8)
        item = src.dtype.itemsize
        for i in range(src.n):
            a, b = int(src.offsets[i]) * item, int(src.offsets[i + 1]) * item
            txn.put(_lmdb_key(i), src.shapes[i].tobytes() + flat[a:b].tobytes(), append=True)
    env.close()


def _lmdb_open(src: Source, path: Path):
    import lmdb

    env = lmdb.open(str(path), readonly=True, lock=False, readahead=False)
    txn = env.begin(buffers=True)
    keys = [_lmdb_key(i) for i in range(src.n)]
    get, ndim, dtype = txn.get, src.ndim, src.dtype
    head = 8 * ndim

    def gather(idx: np.ndarray):
        bufs = [get(keys[i]) for i in idx.tolist()]
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

    gather.keep = (env, txn)  # type: ignore[attr-defined]
    return gather


def _arrow_table(src: Source, binary: bool):
    """The source as an Arrow table, zero-copy: payload as ``list<T>`` (typed, the
    spec's form) or as ``large_binary`` (bytes per record), shape as
    ``fixed_size_list<uint64>[ndim]``."""
    import pyarrow as pa

    values = np.asarray(src.values)
    if binary:
        offsets = np.asarray(src.offsets).astype(np.int64) * src.dtype.itemsize
        payload = pa.Array.from_buffers(
            pa.large_binary(), src.n, [None, pa.py_buffer(offsets), pa.py_buffer(values)]
        )
    else:
        payload = pa.ListArray.from_arrays(pa.array(np.asarray(src.offsets)), pa.array(values))
    shapes = pa.FixedSizeListArray.from_arrays(
        pa.array(np.asarray(src.shapes).reshape(-1)), src.ndim
    )
    return pa.table({"values": payload, "shape": shapes})


def _arrow_writer(binary: bool):
    def write(src: Source, path: Path) -> None:
        import pyarrow as pa

        t = _arrow_table(src, binary)
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)

    return write


def _arrow_open(src: Source, path: Path):
    """``Table.take`` on the memory-mapped file, then the packed views of the
    taken columns (their buffers are fresh and already packed)."""
    import pyarrow as pa

    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    ndim, dtype = src.ndim, src.dtype
    binary = pa.types.is_large_binary(table.schema.field(0).type)

    def gather(idx: np.ndarray):
        t = table.take(idx)
        payload = t.column(0).combine_chunks()
        shapes = t.column(1).combine_chunks().flatten().to_numpy().reshape(-1, ndim)
        if binary:
            buf = payload.buffers()
            o = np.frombuffer(buf[1], np.int64, len(payload) + 1, payload.offset * 8)
            values = np.frombuffer(buf[2], np.uint8, int(o[-1] - o[0]), int(o[0])).view(dtype)
            cu = ((o - o[0]) // dtype.itemsize).astype(np.int32)
        else:
            offsets = payload.offsets.to_numpy()
            cu = offsets - offsets[0] if offsets[0] else offsets
            values = payload.flatten().to_numpy()
        return values, cu, shapes

    return gather


def _loaderx_write(src: Source, path: Path, codec: str, dict_bytes: bytes | None):
    """Creates the writer (setup, untimed) and returns the timed write."""
    from loaderx.zrecord import Ragged, RaggedBatch

    extra = {"dict_bytes": dict_bytes} if codec == "zstd_dict" else {}
    writer = Ragged.create(str(path), src.dtype, ndim=src.ndim, codec=codec, **extra)

    def write() -> None:
        writer.append(RaggedBatch(src.values, src.offsets, src.shapes))
        writer.close()

    return write


def _loaderx_open(src: Source, path: Path):
    from loaderx.zrecord import Ragged

    rs = Ragged.open(str(path))

    def gather(idx: np.ndarray):
        b = rs[idx]
        return np.from_dlpack(b.values), np.from_dlpack(b.cu_seqlens), np.from_dlpack(b.shapes)

    gather.keep = rs  # type: ignore[attr-defined]
    return gather


# ---- worker side: one backend in its own process ------------------------------------


def _warm_files(path: Path) -> None:
    """Reads every byte once so the timed gathers run on a warm page cache."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.read(8 << 20):
                pass


def _warm_up(call, draw, seconds: float) -> None:
    """Up to WARM_BATCHES calls, stopping early once `seconds` have passed."""
    until = time.perf_counter() + seconds
    for _ in range(WARM_BATCHES):
        call(draw())
        if time.perf_counter() > until:
            break


def _check(got, want, idx: np.ndarray) -> None:
    names = ("values", "cu_seqlens", "shapes")
    for name, g, w in zip(names, got, want, strict=True):
        g = np.asarray(g)
        if g.dtype != w.dtype or g.shape != w.shape:
            raise AssertionError(f"{name}: got {g.dtype}{g.shape}, expected {w.dtype}{w.shape}")
        if not np.array_equal(g, w):
            raise AssertionError(f"{name} differ from the source for positions {idx[:8]}...")


def _verify(gather, src: Source, batches: int) -> None:
    rng = np.random.default_rng(SEED + 1)
    for k in range(batches):
        idx = rng.integers(0, src.n, BATCH, dtype=np.int64)
        idx[1::8] = idx[0::8]  # repeated positions
        if k == 0:
            idx[-2:] = (0, src.n - 1)
        _check(gather(idx), src.pack(idx), idx)


def worker(args: argparse.Namespace) -> None:
    """Writes, verifies and times one backend; prints the result as JSON."""
    src = Source(args.src)
    store = Path(args.store)
    _warm_files(Path(args.src))
    backend, codec = args.worker, args.codec
    train_s = dict_size = None
    if backend == "loaderx":
        dict_bytes = None
        if codec == "zstd_dict":
            from loaderx.utils import train_dict

            start = time.perf_counter()
            dict_bytes = train_dict(src.records())
            train_s = time.perf_counter() - start
            dict_size = len(dict_bytes)
        write = _loaderx_write(src, store, codec, dict_bytes)
        open_ = _loaderx_open
    else:
        writers = {
            "npy": _npy_write,
            "lmdb": _lmdb_write,
            "arrow": _arrow_writer(binary=False),
            "arrow-bin": _arrow_writer(binary=True),
        }
        write = lambda: writers[backend](src, store)  # noqa: E731
        open_ = {"npy": _npy_open, "lmdb": _lmdb_open}.get(backend, _arrow_open)
    start = time.perf_counter()
    write()
    write_s = time.perf_counter() - start
    disk = disk_bytes(store)
    _warm_files(store)
    gather = open_(src, store)
    _verify(gather, src, args.verify)
    draws = np.random.default_rng(SEED + 2)
    _warm_up(gather, lambda: draws.integers(0, src.n, BATCH, dtype=np.int64), args.seconds)
    timed = np.random.default_rng(SEED + 3)
    drawn: list[np.ndarray] = []

    def draw() -> np.ndarray:
        drawn.append(timed.integers(0, src.n, BATCH, dtype=np.int64))
        return drawn[-1]

    lat = time_calls(gather, draw, args.seconds)
    total = sum(lat)
    version = None
    if backend == "loaderx":
        version = importlib.metadata.version("loaderx")
    emit(
        {
            "version": version,
            "write_s": write_s,
            "train_s": train_s,
            "dict_size": dict_size,
            "disk": disk,
            "krec_s": len(lat) * BATCH / total / 1e3,
            "gib_s": sum(src.payload(i) for i in drawn) / total / GIB,
            "p95_ms": p95(lat) * 1e3,
            "batches": len(lat),
        }
    )


# ---- main side: orchestrate workers and print tables ---------------------------------


def _num(x: float) -> str:
    """Two or three significant digits, never rounding a small value to 0."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def _describe(name: str, info: dict) -> str:
    lengths = info["lengths"]
    if name == "tokens":
        p10, med, p90 = np.percentile(lengths, [10, 50, 90])
        shape = (
            f"int32 tokens of 16..512 (p10 {p10:.0f}, median {med:.0f}, "
            f"mean {lengths.mean():.1f}, p90 {p90:.0f})"
        )
    else:
        h, w = info["shapes"][:, 1], info["shapes"][:, 2]
        shape = (
            f"uint8 (3, H, W) images, H {h.min()}..{h.max()} (median {np.median(h):.0f}), "
            f"W {w.min()}..{w.max()} (median {np.median(w):.0f})"
        )
    return (
        f"{name}: {info['n']:,} synthetic {shape}, {info['payload'] / MIB:.1f} MiB payload; "
        f"random IID batches of {BATCH}"
    )


def bench_workload(name: str, root: Path, args: argparse.Namespace, peer) -> str:
    spec = WORKLOADS[name]
    n = spec["quick_n"] if args.quick else spec["n"]
    verify = spec["quick_verify"] if args.quick else spec["verify"]
    src_dir = root / name
    info = make_source(src_dir, name, n)
    me = str(Path(__file__).resolve())
    peer_py, peer_info = peer

    def measure(python, backend: str, codec: str = "raw", env=None) -> dict:
        store = root / f"{name}-{backend}-{codec}"
        argv = [me, "--worker", backend, "--src", str(src_dir), "--store", str(store)]
        argv += ["--codec", codec, "--seconds", str(args.seconds), "--verify", str(verify)]
        try:
            return run_worker(python, argv, env)
        finally:
            shutil.rmtree(store, ignore_errors=True)
            if store.is_file():
                store.unlink()

    runs: list[tuple[str, dict]] = []
    notes: list[str] = []

    def attempt(label: str, python, backend: str, codec: str = "raw", env=None) -> None:
        try:
            runs.append((label, measure(python, backend, codec, env)))
        except RuntimeError as e:
            notes.append(f"{label}: failed ({e})")

    attempt("npy-mmap", sys.executable, "npy")
    attempt("lmdb", sys.executable, "lmdb")
    attempt("arrow-ipc", sys.executable, "arrow")
    attempt("arrow-ipc binary", sys.executable, "arrow-bin")
    for codec in CODECS:
        attempt(f"loaderx {codec}", sys.executable, "loaderx", codec)
    # The same gather without the helper thread: shows what the parallel split costs.
    attempt("loaderx raw, 1 thread", sys.executable, "loaderx", "raw", {"LOADERX_NUM_THREADS": "1"})
    for codec in CODECS:
        if peer_py is None:
            notes.append(f"loaderx 2.8.6 {codec}: not run ({peer_info})")
        else:
            attempt(f"loaderx {peer_info} {codec}", peer_py, "loaderx", codec)
    shutil.rmtree(src_dir, ignore_errors=True)

    by = dict(runs)
    headers = [
        "backend",
        "write MiB/s",
        "disk MiB",
        "dict KiB, s",
        "krec/s",
        "GiB/s",
        "p95 ms",
        "vs LMDB",
        "vs Arrow",
    ]
    rows = []
    for label, r in runs:
        ratios = [
            _num(r["krec_s"] / by[b]["krec_s"]) + "x" if b in by else "-"
            for b in ("lmdb", "arrow-ipc")
        ]
        rows.append(
            [
                label,
                f"{info['payload'] / MIB / r['write_s']:.0f}",
                f"{r['disk'] / MIB:.1f}",
                "-" if r["train_s"] is None else f"{r['dict_size'] / 1024:.0f}, {r['train_s']:.2f}",
                _num(r["krec_s"]),
                f"{r['gib_s']:.2f}",
                f"{r['p95_ms']:.2f}",
                *ratios,
            ]
        )
    title = _describe(name, info) + f", >= {args.seconds:g} s timed per backend"
    legend = (
        "Ratios are records/s against lmdb and arrow-ipc (list<T> payload, the typed "
        "form). 'dict KiB, s': dictionary size and train_dict time on the same record "
        "iterable, not part of the write time."
    )
    return "\n".join([title, "", table(headers, rows), "", legend, *notes])


def breakdown(args: argparse.Namespace) -> None:
    """Where the time of one loaderx gather goes (``--breakdown``): each layer of
    the call, for every codec, with LOADERX_NUM_THREADS=1 and 2."""
    from loaderx.utils import train_dict

    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-ragged-", dir=args.dir))
    me = str(Path(__file__).resolve())
    print(f"Machine: {machine()}")
    try:
        for name in WORKLOADS:
            if args.only not in (None, name):
                continue
            spec = WORKLOADS[name]
            make_source(root / name, name, spec["quick_n" if args.quick else "n"])
            src = Source(root / name)
            rows = []
            for codec in CODECS:
                store = root / f"{name}-{codec}"
                d = train_dict(src.records()) if codec == "zstd_dict" else None
                _loaderx_write(src, store, codec, d)()
                for threads in ("1", "2"):
                    argv = [me, "--worker", "parts", "--src", str(root / name)]
                    argv += ["--store", str(store), "--seconds", str(args.seconds)]
                    r = run_worker(sys.executable, argv, {"LOADERX_NUM_THREADS": threads})
                    rows.append([codec, threads, *(f"{v:.0f}" for v in r.values())])
                    headers = ["codec", "threads", *r.keys()]
                shutil.rmtree(store)
            print(f"\n{name}: {src.n:,} records, mean microseconds per batch of {BATCH}\n")
            print(table(headers, rows), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parts_worker(args: argparse.Namespace) -> None:
    """Times the layers of one gather: the native call alone, ``rs.gather`` (adds
    the RaggedBatch wrapper), ``rs[idx]`` (adds index dispatch), ``rs[idx]`` with
    the three ``np.from_dlpack`` (the benchmark's call) and npy-mmap packing."""
    from loaderx.zrecord import Ragged

    src = Source(args.src)
    _warm_files(Path(args.store))
    rs = Ragged.open(args.store)
    native = rs._store()
    rng = np.random.default_rng(SEED)
    draw = lambda: rng.integers(0, src.n, BATCH, dtype=np.int64)  # noqa: E731
    calls = {
        "native call": lambda idx: native.gather_ragged(idx, None),
        "rs.gather": rs.gather,
        "rs[idx]": rs.__getitem__,
        "+ from_dlpack": _loaderx_open(src, Path(args.store)),
        "npy-mmap": src.pack,
    }
    out = {}
    for name, call in calls.items():
        _warm_up(call, draw, args.seconds)
        lat = time_calls(call, draw, args.seconds)
        out[name] = sum(lat) / len(lat) * 1e6
    emit(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="0.3 s per backend, fewer records")
    ap.add_argument("--dir", help="where sources and stores go (default: a new temporary folder)")
    ap.add_argument("--peer-python", help="interpreter of a venv with loaderx 2.8.6")
    ap.add_argument("--only", choices=sorted(WORKLOADS), help="run one workload")
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="time the layers of a loaderx gather with 1 and 2 threads instead",
    )
    for hidden in ("--worker", "--src", "--store", "--codec"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--verify", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "parts":
        return parts_worker(args)
    if args.worker:
        return worker(args)
    args.seconds = args.seconds or (0.3 if args.quick else 2.0)
    if args.breakdown:
        return breakdown(args)
    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-ragged-", dir=args.dir))
    peer = peer_python(args.peer_python)
    print(f"Machine: {machine()}")
    print(f"Load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("Data: synthetic, generated deterministically; real corpora come in a later issue.")
    try:
        for name in WORKLOADS:
            if args.only in (None, name):
                print("\n" + bench_workload(name, root, args, peer), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nLoad average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
