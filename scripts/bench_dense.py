"""Random batch gather from Dense stores, against NumPy memory maps and loaderx 2.8.6.

What is measured: fresh uniform IID batches of 256 positions (with replacement) are
gathered from each backend on a warm page cache until the timed calls sum to at
least two seconds. One timed call is the public read plus consumption as a NumPy
array:

- ``loaderx <codec>``: ``np.from_dlpack(ds[idx])`` on a store of this checkout;
  ``loaderx raw, 1 thread`` is the same with ``LOADERX_NUM_THREADS=1``;
- ``peer 2.8.6 <codec>``: the same calls on a store written by the published
  loaderx 2.8.6, run in its own venv (``--peer-python``, default ``.venv-peer``);
- ``npy-mmap``: ``arr[idx]`` on ``np.load(path, mmap_mode='r')`` of the source;
- ``memcpy 2 threads`` (images only): copying one batch's bytes (a contiguous run
  of records) from an in-RAM copy of the source into a preallocated buffer, half
  per thread: a memory-bandwidth ceiling, not a gather.

Every measurement runs in a fresh worker process on the same source and the same
index sequence. Stores are written from the source ``.npy`` memory map in a single
append. Each worker first verifies its backend: several random batches with
repeated positions plus the first and last record must equal ``src[idx]`` exactly
(dtype, shape and values). Warm-up then reads every record once plus a few random
batches. Index drawing and result destruction are outside the timed span. The
machine is shared, so each backend is measured in three rounds interleaved with
the others and the table shows its median round (``--quick``: one round of 0.3 s
on fewer records).

The data are synthetic but shaped like the real workloads, generated
deterministically: (a) uint8 (3, 224, 224) images, smooth blobs quantized with
pixel noise (plain zstd compresses them about 1.3x); (b) int32 (512,) token
blocks with Zipf-distributed ids below 50257. Real datasets come later.

Columns: logical GiB/s (uncompressed payload per timed second), krecords/s, p95
latency of one batch, allocated disk bytes of the store, and the throughput ratio
to npy-mmap.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _bench_common import (
    GIB,
    checkout,
    disk_bytes,
    emit,
    load_average,
    machine,
    one_bench_at_a_time,
    p95,
    peer_python,
    run_worker,
    table,
    time_calls,
)

BATCH = 256
SEED = 20240601
VOCAB = 50257
WORKLOADS = {
    "images": {"dtype": "uint8", "shape": (3, 224, 224), "n": 2_500, "quick_n": 600},
    "tokens": {"dtype": "int32", "shape": (512,), "n": 200_000, "quick_n": 20_000},
}
CODECS = ("raw", "zstd")
CHUNK_BYTES = 64 * 1024**2


# ---- synthetic sources ------------------------------------------------------------


def _box_blur(x: np.ndarray, width: int, axis: int) -> np.ndarray:
    """Moving average of `width` along `axis` (the output is `width` shorter)."""
    c = np.cumsum(x, axis=axis, dtype=np.float32)
    n = x.shape[axis]
    hi = np.take(c, np.arange(width, n), axis=axis)
    lo = np.take(c, np.arange(0, n - width), axis=axis)
    return (hi - lo) * (1.0 / width)


def _images(rng: np.random.Generator, count: int) -> np.ndarray:
    """Smooth random colour fields on a 224x224 grid, quantized to steps of 6 with
    +-1 pixel noise: image-like statistics that give zstd something to find."""
    low = rng.random((count, 3, 29, 29), dtype=np.float32) * 255
    smooth = _box_blur(_box_blur(low.repeat(8, axis=2).repeat(8, axis=3), 8, 2), 8, 3)
    pixels = np.floor(smooth / 6) * 6 + rng.integers(-1, 2, smooth.shape, dtype=np.int8)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _tokens(rng: np.random.Generator, count: int) -> np.ndarray:
    """Blocks of 512 ids drawn from a Zipf(1.1) law over a shuffled vocabulary."""
    weights = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    cdf = np.cumsum(weights) / weights.sum()
    vocab = np.random.default_rng(SEED).permutation(VOCAB).astype(np.int32)
    ids = vocab[np.minimum(np.searchsorted(cdf, rng.random(count * 512)), VOCAB - 1)]
    return ids.reshape(count, 512)


def make_source(path: Path, name: str, n: int) -> None:
    """Writes workload `name` with `n` records to `path` as .npy, chunk by chunk."""
    spec = WORKLOADS[name]
    out = np.lib.format.open_memmap(path, "w+", np.dtype(spec["dtype"]), (n, *spec["shape"]))
    rng = np.random.default_rng(SEED)
    per_chunk = max(1, CHUNK_BYTES // (out.itemsize * int(np.prod(spec["shape"]))))
    make = _images if name == "images" else _tokens
    for start in range(0, n, per_chunk):
        stop = min(n, start + per_chunk)
        out[start:stop] = make(rng, stop - start)
    out.flush()
    del out


# ---- worker side: one backend in its own process ----------------------------------


def _open_backend(backend: str, src_path: str, store: str, codec: str):
    """Returns (read(idx) -> ndarray, path whose disk bytes to report)."""
    src = np.load(src_path, mmap_mode="r")
    if backend == "npy":
        return (lambda idx: src[idx]), src_path
    from loaderx.zrecord import Dense  # this checkout's or the peer's, per interpreter

    if not Path(store).exists():  # the first round writes it, later rounds reuse it
        with Dense.create(store, src.dtype, src.shape[1:], codec=codec) as writer:
            writer.append(src)
    ds = Dense.open(store)
    return (lambda idx: np.from_dlpack(ds[idx])), store


def _verify(read, src: np.ndarray, rng: np.random.Generator) -> None:
    n = len(src)
    for _ in range(5):
        idx = rng.integers(0, n, BATCH, dtype=np.int64)
        idx[1::8] = idx[0::8]  # repeated positions
        idx[-2:] = (0, n - 1)
        out = read(idx)
        if out.dtype != src.dtype or out.shape != (BATCH, *src.shape[1:]):
            raise AssertionError(f"got {out.dtype}{out.shape}, expected {src.dtype}")
        if not np.array_equal(out, src[idx]):
            raise AssertionError("gathered records differ from the source")


def _warm(read, n: int, rng: np.random.Generator) -> None:
    for start in range(0, n, BATCH):
        read(np.arange(start, min(n, start + BATCH), dtype=np.int64))
    for _ in range(5):
        read(rng.integers(0, n, BATCH, dtype=np.int64))


def _memcpy_reader(src: np.ndarray):
    """Copies the bytes of one batch, a contiguous run of records starting at the
    batch's first position, from an in-RAM copy of the whole source into a
    preallocated buffer; each of two threads copies half."""
    records = np.array(src)  # larger than the last-level cache for the full data
    out = np.empty((BATCH, *src.shape[1:]), src.dtype)
    half = BATCH // 2
    pool = ThreadPoolExecutor(2)

    def read(idx: np.ndarray) -> np.ndarray:
        at = int(idx[0]) % (len(records) - BATCH + 1)
        first = pool.submit(np.copyto, out[:half], records[at : at + half])
        second = pool.submit(np.copyto, out[half:], records[at + half : at + BATCH])
        first.result()
        second.result()
        return out

    return read


def worker(args: argparse.Namespace) -> None:
    """Measures one backend and prints its result as JSON."""
    src = np.load(args.src, mmap_mode="r")
    n = len(src)
    if args.worker == "memcpy":
        read, disk = _memcpy_reader(src), None
    else:
        read, disk_path = _open_backend(args.worker, args.src, args.store, args.codec)
        _verify(read, src, np.random.default_rng(SEED + 1))
        disk = disk_bytes(disk_path)
    _warm(read, n, np.random.default_rng(SEED + 2))
    rng = np.random.default_rng(SEED + 3)
    lat = time_calls(read, lambda: rng.integers(0, n, BATCH, dtype=np.int64), args.seconds)
    batch_bytes = BATCH * src.itemsize * int(np.prod(src.shape[1:]))
    total = sum(lat)
    emit(
        {
            "gib_s": len(lat) * batch_bytes / total / GIB,
            "krec_s": len(lat) * BATCH / total / 1e3,
            "p95_ms": p95(lat) * 1e3,
            "disk": disk,
            "batches": len(lat),
        }
    )


# ---- main side: orchestrate workers and print tables --------------------------------


def _row(label: str, r: dict, base: float) -> list[str]:
    disk = "-" if r["disk"] is None else f"{r['disk']:,}"
    gib, krec, p95_ms = f"{r['gib_s']:.2f}", f"{r['krec_s']:.0f}", f"{r['p95_ms']:.2f}"
    return [label, gib, krec, p95_ms, disk, f"{r['gib_s'] / base:.2f}x"]


def _backends(name: str, peer) -> tuple[list[tuple], list[str]]:
    """(label, interpreter, worker kind, codec, extra env) of every backend to run on
    workload `name`, and notes about those that cannot run."""
    me = sys.executable
    rows = [("npy-mmap", me, "npy", "raw", {})]
    rows += [(f"loaderx {c}", me, "loaderx", c, {}) for c in CODECS]
    rows.append(("loaderx raw, 1 thread", me, "loaderx", "raw", {"LOADERX_NUM_THREADS": "1"}))
    peer_py, peer_info = peer
    if peer_py is None:
        notes = [f"peer loaderx 2.8.6: not run ({peer_info})"]
    else:
        notes = []
        rows += [(f"peer {peer_info} {c}", peer_py, "loaderx", c, {}) for c in CODECS]
    if name == "images":
        rows.append(("memcpy 2 threads", me, "memcpy", "raw", {}))
    return rows, notes


def bench_workload(name: str, n: int, root: Path, args: argparse.Namespace, peer) -> str:
    """Runs every backend `args.rounds` times, interleaved, and tabulates each
    backend's median round (by GiB/s). Stores are written by the first round."""
    src = root / f"{name}.npy"
    make_source(src, name, n)
    backends, notes = _backends(name, peer)
    rounds: dict[str, list[dict]] = {b[0]: [] for b in backends}
    script = str(Path(__file__).resolve())
    try:
        for _ in range(args.rounds):
            for i, (label, python, kind, codec, env) in enumerate(backends):
                if label not in rounds:  # failed in an earlier round
                    continue
                argv = [script, "--worker", kind, "--src", str(src), "--codec", codec]
                argv += ["--store", str(root / f"{name}-{i}"), "--seconds", str(args.seconds)]
                try:
                    rounds[label].append(run_worker(python, argv, env))
                except RuntimeError as e:
                    notes.append(f"{label}: failed ({e})")
                    del rounds[label]
    finally:
        for i in range(len(backends)):
            shutil.rmtree(root / f"{name}-{i}", ignore_errors=True)
    median = {k: sorted(v, key=lambda r: r["gib_s"])[len(v) // 2] for k, v in rounds.items()}
    base = median["npy-mmap"]["gib_s"]
    rows = [_row(label, r, base) for label, r in median.items()]
    spec = WORKLOADS[name]
    record_bytes = np.dtype(spec["dtype"]).itemsize * int(np.prod(spec["shape"]))
    title = (
        f"{name}: {n:,} synthetic {spec['dtype']}{spec['shape']} records "
        f"({record_bytes / 1024:.0f} KiB each), batch {BATCH} "
        f"({BATCH * record_bytes / 1024**2:.1f} MiB); median of {args.rounds} interleaved "
        f"rounds of >= {args.seconds:g} s timed each"
    )
    headers = ["backend", "GiB/s", "krec/s", "p95 ms", "disk bytes", "vs npy"]
    return "\n".join([title, "", table(headers, rows), *notes])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="0.3 s per backend, fewer records")
    ap.add_argument("--dir", help="where sources and stores go (default: a new /tmp folder)")
    ap.add_argument("--peer-python", help="interpreter of a venv with loaderx 2.8.6")
    ap.add_argument("--only", choices=sorted(WORKLOADS), help="run one workload")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per backend (default 3)")
    for hidden in ("--worker", "--src", "--store", "--codec"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    args.seconds = args.seconds or (0.3 if args.quick else 2.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    with one_bench_at_a_time():
        run(args)


def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-dense-", dir=args.dir))
    peer = peer_python(args.peer_python)
    print(f"Machine: {machine()}")
    print(f"loaderx checkout: {checkout()}")
    print(f"Load average at start: {load_average()}")
    print("Data: synthetic, generated deterministically; real datasets come in a later issue.")
    try:
        for name, spec in WORKLOADS.items():
            if args.only in (None, name):
                n = spec["quick_n"] if args.quick else spec["n"]
                print("\n" + bench_workload(name, n, root, args, peer), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nLoad average at end: {load_average()}")


if __name__ == "__main__":
    main()
