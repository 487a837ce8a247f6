"""Random batch gather of fixed-shape records, against the stores a user might pick instead.

Every backend persists the same (n, *item_shape) source and, inside one timed call,
turns a batch of positions into one stacked ``(256, *item_shape)`` ndarray. loaderx
returns it with ``np.from_dlpack(ds[idx])`` on a Dense store; the others build it.
The adapters live in ``loaderx_bench/peers.py`` (their docstrings say how each store is
laid out and read): npy memory map (``arr[idx]``), LMDB (one key per record), HDF5 (one
(n, *item_shape) dataset chunked one record per chunk, raw and gzip), Arrow IPC
(memory-mapped: raw ``list<T>``, zstd record batches, raw ``large_binary``), Parquet
(zstd), ArrayRecord (raw and zstd, ``group_size:1``), Lance (its defaults), loaderx of
this checkout (raw, zstd, zstd_dict, and raw with ``LOADERX_NUM_THREADS=1``) and the
published loaderx 2.8.6 in its own venv (``--peer-python``, default ``.venv-peer``),
run as a black box with the same calls. For images, ``memcpy 2 threads`` copies one
batch's bytes (a contiguous run of records starting at the batch's first position)
from an in-RAM copy of the source into a preallocated buffer, half per thread: a
memory-bandwidth ceiling, not a gather.

Data: the real sets under ``data/`` (``docs/datasets.md``): ``images``,
``data/vision/dense_images.npy`` from ``scripts/prepare_vision.py``, 2,500 photographs
resized and center-cropped to uint8 (3, 224, 224); ``tokens``,
``data/tokens/dense_tokens.npy`` from ``scripts/prepare_tokens.py``, 200,000 blocks of
512 GPT-2 token ids (int32) of Debian documentation prose. ``--synthetic``, or a
missing file, falls back to deterministic synthetic data of the same dtype and shape
(smooth colour fields with pixel noise; Zipf-distributed ids), and the output says
so. ``--quick`` takes a prefix of the records.

Writes: every backend starts from the same memory-mapped source (read once before)
and writes it completely, loaderx in one ``append`` of the whole array. Write time
covers adaptation, writing and publishing (each backend's own close/commit) and an
fsync of every file of the store, so that it runs until the store is durable for
every backend alike (dirty pages are flushed before it starts), not writer setup
(``Dense.create``) or dictionary training (``loaderx.utils.train_dict`` for
zstd_dict, reported in a note under the table).

Gathers: each backend runs in a fresh worker process. It first verifies batches with
repeated positions plus the first and last record against the source (dtype, shape
and values, exactly), then warms up on the page cache (the store's files are
dropped from it and read back once, so that readahead, not the writer, decides how
they are cached; then a few batches), then times fresh uniform IID batches of 256
positions until they sum to >= 2 s (``--quick``: 0.3 s). All backends see the same
positions.
Drawing the positions and dropping the result are outside the timed span. The
machine is shared, so every backend is timed in ``--rounds`` rounds (default 3;
``--quick``: 1) interleaved with the others, each round in a fresh process with fresh
positions; the first round also writes and verifies, the later ones reopen that
store. The table shows each backend's median round by records/s. A backend whose
first batch takes longer than ``--max-batch-s``, or whose worker runs past
``--budget`` seconds, is reported as too slow; one whose package cannot be imported
as unavailable; nothing is dropped silently.

Columns: write MiB/s (logical bytes over the write time), disk MiB (allocated blocks
of the store), krecords/s, logical GiB/s (uncompressed payload per timed second),
p95 latency of one batch, and records/s against npy-mmap and against the published
loaderx with the same codec. ``--json PATH`` also writes the results for
``scripts/plot_benchmarks.py``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from loaderx_bench.gather import (
    BATCH,
    CODECS,
    PEER_ROWS,
    Expected,
    gather_arguments,
    gather_defaults,
    gather_plan,
    measure_plan,
    render_gathers,
    run_gather_bench,
    store_worker,
    time_gathers,
)
from loaderx_bench.machine import one_bench_at_a_time
from loaderx_bench.memory import warm_array
from loaderx_bench.paths import REPO
from loaderx_bench.units import MIB
from loaderx_bench.workers import emit

SEED = 20240601
VOCAB = 50257
# real: the prepared file; verify: correctness batches before timing; quick_n: the
# prefix --quick uses; synthetic_n: records of the synthetic fallback.
WORKLOADS = {
    "images": {
        "dtype": "uint8",
        "shape": (3, 224, 224),
        "real": "data/vision/dense_images.npy",
        "prepare": "scripts/prepare_vision.py",
        "synthetic_n": 2_500,
        "quick_n": 300,
        "verify": 5,
        "quick_verify": 2,
    },
    "tokens": {
        "dtype": "int32",
        "shape": (512,),
        "real": "data/tokens/dense_tokens.npy",
        "prepare": "scripts/prepare_tokens.py",
        "synthetic_n": 200_000,
        "quick_n": 20_000,
        "verify": 20,
        "quick_verify": 3,
    },
}
CHUNK_BYTES = 64 * MIB
MEMCPY = ("memcpy 2 threads", sys.executable, "memcpy", "raw", None, None)
# The variable-shape HDF5 layout has no fixed-shape counterpart.
DENSE_ROWS = [r for r in PEER_ROWS if r[0] != "hdf5 vlen"]


# ---- sources: the real data under data/, or synthetic ---------------------------------


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
    """Writes synthetic workload `name` with `n` records to `path` as .npy, chunk by
    chunk (also the source of ``loaderx_bench.write``)."""
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


def prepare_source(root: Path, name: str, args: argparse.Namespace) -> tuple[Path, int, str]:
    """The .npy file of workload `name`, how many of its records to use and what the
    data are: the real file under data/, or a synthetic one written under `root`."""
    spec = WORKLOADS[name]
    real = REPO / spec["real"]
    if args.synthetic or not real.exists():
        n = spec["quick_n"] if args.quick else spec["synthetic_n"]
        path = root / f"{name}.npy"
        make_source(path, name, n)
        kind = "synthetic (deterministic)"
        if not args.synthetic:
            kind += f", because {spec['real']} is missing (make it with {spec['prepare']})"
            print(f"{name}: {kind}", file=sys.stderr)
        return path, n, kind
    src = np.load(real, mmap_mode="r")
    want = (np.dtype(spec["dtype"]), tuple(spec["shape"]))
    if (src.dtype, src.shape[1:]) != want:
        raise ValueError(f"{real}: {src.dtype}{src.shape}, expected {want[0]}(n, *{want[1]})")
    n = min(spec["quick_n"], len(src)) if args.quick else len(src)
    return real, n, f"real, {spec['real']} ({spec['prepare']})"


def describe(name: str, src: np.ndarray, kind: str) -> dict:
    """Size and shape of a workload, for the table's title and the JSON."""
    record = src.itemsize * int(np.prod(src.shape[1:]))
    info = {
        "records": len(src),
        "dtype": str(src.dtype),
        "shape": list(src.shape[1:]),
        "record_kib": record / 1024,
        "payload_mib": src.nbytes / MIB,
        "data": kind,
    }
    info["title"] = (
        f"{name}: {len(src):,} {src.dtype}{tuple(src.shape[1:])} records "
        f"({record / 1024:.0f} KiB each), {src.nbytes / MIB:.1f} MiB payload; data: {kind}; "
        f"random IID batches of {BATCH} ({BATCH * record / MIB:.1f} MiB)"
    )
    return info


def load(args: argparse.Namespace) -> np.ndarray:
    path, n = args.src
    return np.load(path, mmap_mode="r")[: int(n)]


# ---- worker side: one backend in its own process ----------------------------------------


def expected(src: np.ndarray) -> Expected:
    """A gather must return exactly ``src[idx]``."""
    record = src.itemsize * int(np.prod(src.shape[1:]))

    def payload(idx: np.ndarray) -> int:
        return len(idx) * record

    return Expected(len(src), src.nbytes, lambda idx: (src[idx],), payload, ("batch",))


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
    """Writes, verifies and times one backend (``gather.store_worker``), or
    times the memcpy ceiling."""
    src = load(args)
    warm_array(src)
    if args.worker != "memcpy":
        return store_worker(args, src, expected(src), SEED)
    read = _memcpy_reader(src)
    emit(
        {
            "version": f"numpy {np.__version__}",
            **time_gathers(read, expected(src), args.seconds, SEED, args.round),
        }
    )


# ---- main side: orchestrate workers and print tables ------------------------------------


def render(info: dict, rows: list[dict]) -> str:
    """The workload's table, the rows that were not measured and dictionary notes."""
    note = (
        "Ratios are records/s (for fixed-size records the same as GiB/s); 'vs 2.8.6' is "
        "against the published loaderx with the same codec."
    )
    if any(r["backend"] == "memcpy" for r in rows):
        note += " memcpy 2 threads is a memory-bandwidth ceiling, not a gather."
    return render_gathers(info, rows, [("vs npy", "npy-mmap"), ("vs 2.8.6", None)], note)


def bench_workload(name: str, root: Path, args: argparse.Namespace, peer) -> dict:
    spec = WORKLOADS[name]
    (root / name).mkdir(parents=True, exist_ok=True)
    path, n, kind = prepare_source(root / name, name, args)
    src_args = [str(path), str(n)]
    info = describe(name, np.load(path, mmap_mode="r")[:n], kind)
    verify = spec["quick_verify"] if args.quick else spec["verify"]
    tail = [MEMCPY] if name == "images" else []
    plan = gather_plan(DENSE_ROWS, CODECS, peer, args.rows, tail)
    try:
        rows = measure_plan(plan, __spec__.name, src_args, verify, root, name, args, peer[1])
    finally:
        shutil.rmtree(root / name, ignore_errors=True)
    return {"info": info, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gather_arguments(ap, WORKLOADS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    gather_defaults(args)
    with one_bench_at_a_time():
        run_gather_bench("bench_dense", args, WORKLOADS, bench_workload, render)


if __name__ == "__main__":
    main()
