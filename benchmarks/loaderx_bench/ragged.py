"""Random batch gather of variable-shape records, against the stores a user might pick instead.

Every backend persists each record's payload plus its exact shape and, inside one
timed call, turns a batch of positions into the same compute-ready packed form:
``values`` (all elements laid end to end), ``cu_seqlens`` (n + 1 int32 element
offsets) and ``shapes`` (n x ndim uint64). loaderx returns exactly that as a
RaggedBatch (consumed with ``np.from_dlpack``); the others build it. The adapters
live in ``loaderx_bench/peers.py`` (their docstrings say how each store is laid out
and read):
npy memory map, LMDB, HDF5 (a vlen dataset; one dataset per record, raw and with
one gzip chunk each), Arrow IPC (memory-mapped: raw ``list<T>``, zstd record
batches, raw ``large_binary``), Parquet (zstd), ArrayRecord (raw and zstd,
``group_size:1``), Lance (its defaults), loaderx of this checkout (raw, zstd, zstd_dict, and raw
with ``LOADERX_NUM_THREADS=1``) and the published loaderx 2.8.6 in its own venv
(``--peer-python``, default ``.venv-peer``), run as a black box with the same calls.

Data: the real corpora under ``data/`` made by ``scripts/prepare_tokens.py`` (GPT-2
token records of Debian documentation prose, int32, 16..512 ids) and
``scripts/prepare_vision.py`` (photographs at native resolution, uint8 (3, H, W)).
``--synthetic``, or a missing ``data/``, falls back to deterministic synthetic data of
the same kind, and the output says so. ``--quick`` takes a prefix of the records.

Writes: every backend starts from the same prepared source (memory-mapped .npy
values, int32 offsets and uint64 shapes) and writes it completely, loaderx in one
``append`` of a RaggedBatch built from those arrays. Write time covers adaptation,
writing and publishing (each backend's own close/commit) and an fsync of every file
of the store, so that it runs until the store is durable for every backend alike
(dirty pages are flushed before it starts), not writer setup or dictionary
training, which is reported separately.

Gathers: each backend runs in a fresh worker process. It first verifies batches
with repeated positions plus the first and last record against the source (dtype,
values, cu_seqlens and shapes, exactly), then warms up on the page cache (the
store's files are dropped from it and read back once, so that readahead, not the
writer, decides how they are cached; then a few batches), then times fresh uniform
IID batches of 256 positions until they sum to >= 2 s (``--quick``: 0.3 s). All
backends see the same positions. Drawing the positions and dropping the result are outside the
timed span. The machine is shared, so every backend is timed in ``--rounds``
rounds (default 3; ``--quick``: 1) interleaved with the others, each round in a
fresh process with fresh positions; the first round also writes and verifies, the
later ones reopen that store. The table shows each backend's median round by
records/s. A backend whose first batch takes longer than ``--max-batch-s``, or
whose worker runs past ``--budget`` seconds, is reported as too slow; one whose
package cannot be imported as unavailable; nothing is dropped silently.

``--json PATH`` also writes the results for ``scripts/plot_benchmarks.py``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from loaderx_bench.files import warm_files
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
)
from loaderx_bench.machine import checkout, machine, one_bench_at_a_time
from loaderx_bench.memory import warm_array
from loaderx_bench.paths import REPO
from loaderx_bench.peers import RaggedSource, make
from loaderx_bench.report import table
from loaderx_bench.timing import time_calls, warm_up
from loaderx_bench.units import MIB
from loaderx_bench.workers import emit, run_backend

SEED = 20240607
VOCAB = 50257
# verify: correctness batches before timing. quick_n: the prefix --quick uses (the
# first 80 photos are small, so a quick images batch is a fraction of a full one).
WORKLOADS = {
    "tokens": {"quick_n": 20_000, "verify": 100, "quick_verify": 10, "synthetic_n": 200_000},
    "images": {"quick_n": 80, "verify": 5, "quick_verify": 2, "synthetic_n": 300},
}


# ---- sources: the real data under data/, or synthetic ----------------------------------


def _zipf(rng: np.random.Generator, count: int, size: int, a: float) -> np.ndarray:
    """`count` ranks in 0..size-1 drawn with probability proportional to 1/(rank+1)^a."""
    weights = 1.0 / np.arange(1, size + 1) ** a
    cdf = np.cumsum(weights) / weights.sum()
    return np.minimum(np.searchsorted(cdf, rng.random(count)), size - 1)


def _synthetic_tokens(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, lengths) of `n` token records: a stream of single Zipf(1.1) ids (two
    thirds) and recurring 2..8-id phrases (one third), cut at log-normal lengths
    (median 130) clipped to 16..512."""
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
    pool = np.concatenate([phrases, singles])
    ustart = np.where(is_phrase, phrase_at[pick], len(phrases) + np.arange(units))
    ulen = np.where(is_phrase, phrase_len[pick], 1)
    out_at = np.cumsum(ulen) - ulen
    stream = pool[np.repeat(ustart - out_at, ulen) + np.arange(int(ulen.sum()))]
    return stream[:total], lengths


def _synthetic_images(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """`n` uint8 (3, H, W) smooth colour fields (H, W in 100..700) with +-1 noise."""
    out = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(100, 701, 2))
        low = rng.random((3, h // 48 + 2, w // 48 + 2), dtype=np.float32) * 255
        y = np.linspace(0, low.shape[1] - 1.001, h, dtype=np.float32)
        x = np.linspace(0, low.shape[2] - 1.001, w, dtype=np.float32)
        y0, x0 = y.astype(np.int64), x.astype(np.int64)
        ty, tx = (y - y0)[None, :, None], (x - x0)[None, None, :]
        rows = low[:, y0] * (1 - ty) + low[:, y0 + 1] * ty
        pixels = rows[:, :, x0] * (1 - tx) + rows[:, :, x0 + 1] * tx
        pixels += rng.integers(-1, 2, (3, h, w))
        out.append(np.clip(pixels, 0, 255).astype(np.uint8))
    return out


def _write_synthetic(root: Path, name: str, n: int) -> Path:
    rng = np.random.default_rng(SEED + (name == "images"))
    if name == "tokens":
        values, lengths = _synthetic_tokens(rng, n)
        shapes = lengths.astype(np.uint64).reshape(-1, 1)
    else:
        records = _synthetic_images(rng, n)
        values = np.concatenate([r.reshape(-1) for r in records])
        shapes = np.array([r.shape for r in records], dtype=np.uint64)
    np.save(root / "values.npy", values)
    return _write_index(root, np.concatenate([[0], np.cumsum(np.prod(shapes, 1))]), shapes)


def _write_index(root: Path, offsets: np.ndarray, shapes: np.ndarray) -> Path:
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("the workload overflows int32 offsets")
    np.save(root / "offsets.npy", np.asarray(offsets).astype(np.int32))
    np.save(root / "shapes.npy", np.ascontiguousarray(shapes, dtype=np.uint64))
    return root


REAL = {
    "tokens": ("data/tokens/tokens.npy", "data/tokens/offsets.npy", None),
    "images": (
        "data/vision/ragged_values.npy",
        "data/vision/ragged_offsets.npy",
        "data/vision/ragged_shapes.npy",
    ),
}


def real_available(name: str) -> bool:
    return all((REPO / f).exists() for f in REAL[name] if f)


def prepare_source(root: Path, name: str, quick: bool, synthetic: bool) -> tuple[list[str], str]:
    """Writes the int32 offsets and uint64 shapes of workload `name` under `root`
    (values stay where they are, memory-mapped); returns the three paths for the
    workers and what the data are."""
    root.mkdir(parents=True, exist_ok=True)
    spec = WORKLOADS[name]
    if synthetic:
        n = spec["quick_n"] if quick else spec["synthetic_n"]
        _write_synthetic(root, name, n)
        values, kind = root / "values.npy", "synthetic (deterministic)"
    else:
        values_rel, offsets_rel, shapes_rel = REAL[name]
        offsets = np.load(REPO / offsets_rel, mmap_mode="r")
        n = min(spec["quick_n"], len(offsets) - 1) if quick else len(offsets) - 1
        offsets = np.asarray(offsets[: n + 1])
        if shapes_rel:
            shapes = np.load(REPO / shapes_rel, mmap_mode="r")[:n]
        else:
            shapes = np.diff(offsets).astype(np.uint64).reshape(-1, 1)
        _write_index(root, offsets, shapes)
        values = REPO / values_rel
        script = "prepare_tokens.py" if name == "tokens" else "prepare_vision.py"
        kind = f"real, {values_rel} (scripts/{script})"
    return [str(values), str(root / "offsets.npy"), str(root / "shapes.npy")], kind


def describe(name: str, src: RaggedSource, kind: str) -> dict:
    """Size and shape statistics of a workload, for the table's title and the JSON."""
    shapes = np.asarray(src.shapes)
    info = {"records": src.n, "payload_mib": src.payload_bytes / MIB, "data": kind}
    if name == "tokens":
        lengths = shapes[:, 0]
        p10, med, p90 = np.percentile(lengths, [10, 50, 90])
        text = (
            f"int32 token records of {lengths.min()}..{lengths.max()} ids (p10 {p10:.0f}, "
            f"median {med:.0f}, mean {lengths.mean():.1f}, p90 {p90:.0f})"
        )
    else:
        h, w = shapes[:, 1], shapes[:, 2]
        text = (
            f"uint8 (3, H, W) images, H {h.min()}..{h.max()} (median {np.median(h):.0f}), "
            f"W {w.min()}..{w.max()} (median {np.median(w):.0f}), "
            f"mean {src.payload_bytes / src.n / MIB:.2f} MiB per record"
        )
    info["title"] = (
        f"{name}: {src.n:,} {text}, {info['payload_mib']:.1f} MiB payload; data: {kind}; "
        f"random IID batches of {BATCH}"
    )
    return info


# ---- worker side: one backend in its own process --------------------------------------


def expected(src: RaggedSource) -> Expected:
    """A gather must return exactly ``src.pack(idx)``."""
    names = ("values", "cu_seqlens", "shapes")
    return Expected(src.n, src.payload_bytes, src.pack, src.payload, names)


def worker(args: argparse.Namespace) -> None:
    """Writes, verifies and times one backend (``gather.store_worker``)."""
    src = RaggedSource.load(*args.src)
    warm_array(src.values)
    store_worker(args, src, expected(src), SEED)


# ---- main side: orchestrate workers and print tables ------------------------------------


def render(info: dict, rows: list[dict]) -> str:
    """The workload's table, the rows that were not measured and dictionary notes."""
    versus = [("vs LMDB", "lmdb"), ("vs Arrow", "arrow-ipc"), ("vs 2.8.6", None)]
    note = (
        "Ratios are records/s; 'vs Arrow' is against arrow-ipc (list<T> payload), "
        "'vs 2.8.6' against the published loaderx with the same codec."
    )
    return render_gathers(info, rows, versus, note)


def bench_workload(name: str, root: Path, args: argparse.Namespace, peer) -> dict:
    spec = WORKLOADS[name]
    synthetic = args.synthetic or not real_available(name)
    src_paths, kind = prepare_source(root / name, name, args.quick, synthetic)
    if synthetic and not args.synthetic:
        kind += ", because the real data under data/ are missing"
    info = describe(name, RaggedSource.load(*src_paths), kind)
    verify = spec["quick_verify"] if args.quick else spec["verify"]
    plan = gather_plan(PEER_ROWS, CODECS, peer, args.rows)
    try:
        rows = measure_plan(plan, __spec__.name, src_paths, verify, root, name, args, peer[1])
    finally:
        shutil.rmtree(root / name, ignore_errors=True)
    return {"info": info, "rows": rows}


def breakdown(args: argparse.Namespace) -> None:
    """Where the time of one loaderx gather goes (``--breakdown``): each layer of
    the call, for every codec, with LOADERX_NUM_THREADS=1 and 2."""
    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-ragged-", dir=args.dir))
    print(f"Machine: {machine()}\nloaderx checkout: {checkout()}")
    try:
        for name in WORKLOADS:
            if args.only not in (None, name):
                continue
            synthetic = args.synthetic or not real_available(name)
            paths, kind = prepare_source(root / name, name, args.quick, synthetic)
            src = RaggedSource.load(*paths)
            rows, headers = [], []
            for codec in CODECS:
                store = make("loaderx", root / f"{name}-{codec}", codec)
                store.prepare(src)
                store.write(src)
                for threads in ("1", "2"):
                    argv = ["-m", __spec__.name, "--worker", "parts", "--src", *paths]
                    argv += ["--store", str(store.path), "--seconds", str(args.seconds)]
                    r = run_backend(
                        sys.executable, argv, {"LOADERX_NUM_THREADS": threads}, args.budget
                    )
                    rows.append([codec, threads, *(f"{v:.0f}" for v in r.values())])
                    headers = ["codec", "threads", *r.keys()]
                store.remove()
            print(f"\n{name} ({kind}): {src.n:,} records, mean µs per batch of {BATCH}\n")
            print(table(headers, rows), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parts_worker(args: argparse.Namespace) -> None:
    """Times the layers of one gather through the public API: ``rs.gather`` (the
    native call and the RaggedBatch wrapper), ``rs[idx]`` (adds index dispatch),
    ``rs[idx]`` with the three ``np.from_dlpack`` (the benchmark's call) and
    npy-mmap packing."""
    from loaderx.zrecord import Ragged

    src = RaggedSource.load(*args.src)
    warm_array(src.values)
    warm_files(Path(args.store))
    rs = Ragged.open(args.store)
    rng = np.random.default_rng(SEED)
    draw = lambda: rng.integers(0, src.n, BATCH, dtype=np.int64)  # noqa: E731

    def full(idx: np.ndarray):
        b = rs[idx]
        return np.from_dlpack(b.values), np.from_dlpack(b.cu_seqlens), np.from_dlpack(b.shapes)

    calls = {
        "rs.gather": rs.gather,
        "rs[idx]": rs.__getitem__,
        "+ from_dlpack": full,
        "npy-mmap": src.pack,
    }
    out = {}
    for name, call in calls.items():
        warm_up(call, draw, args.seconds)
        lat = time_calls(call, draw, args.seconds)
        out[name] = sum(lat) / len(lat) * 1e6
    emit(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gather_arguments(ap, WORKLOADS)
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="time the layers of a loaderx gather with 1 and 2 threads instead",
    )
    args = ap.parse_args(argv)
    if args.worker == "parts":
        return parts_worker(args)
    if args.worker:
        return worker(args)
    gather_defaults(args)
    with one_bench_at_a_time():
        if args.breakdown:
            return breakdown(args)
        run_gather_bench("bench_ragged", args, WORKLOADS, bench_workload, render)


if __name__ == "__main__":
    main()
