"""End-to-end benchmark: loaderx's Loader against torch.utils.data.DataLoader.

Two workloads, batch 256:

* dense: uint8 (3, 224, 224) images. loaderx reads a raw Dense store; the torch
  DataLoader reads the same records from one ``np.load(mmap_mode='r')`` array.
* ragged: variable-length int32 token records. loaderx reads a raw Ragged store;
  the torch DataLoader reads per-record slices of a memory-mapped token array and
  packs them (values + int32 cu_seqlens + uint64 shapes, no padding) in its
  collate function.

Real data from ``scripts/prepare_vision.py`` / ``scripts/prepare_tokens.py`` is used
when present under ``data/``; otherwise deterministic synthetic data of the same
geometry is generated (the output says which). Every backend delivers CPU torch
tensors (loaderx through ``torch.from_dlpack`` in its transform) and runs in a
fresh process. Each process imports its libraries, then takes its baseline PSS
(proportional set size, so pages shared between a parent and its forked workers
count once) and builds its loader. The first batch is checked against the source
records, which the check reads with ``os.preadv`` into a temporary that is freed
before timing, so the check leaves neither mapped file pages nor arrays in the
measured process. After a warm-up the timed steps run while a sampler thread
records the PSS of the process and all its children every 20 ms. "peak PSS" is the
highest sample; "loader PSS" is that peak minus the baseline (importing torch alone
maps much of the peak): the memory the data path itself costs. It is split, at the peak
sample, into anonymous memory (``Pss_Anon`` in ``/proc/<pid>/smaps_rollup``:
batches, pools, heaps, copy-on-write copies in forked workers), mapped files
(``Pss_File``: page-cache pages of the data files mapped into the process tree;
the kernel can reclaim them, but RSS and PSS count them) and shared memory
(``Pss_Shmem``: the ``/dev/shm`` segments torch's workers hand batches over in).
"loader RSS" is the same difference for the sum of the tree's RSS, what "peak RSS
of the process tree" usually means. It counts a page once per process that maps it,
so it charges forked workers again for every page they share with their parent,
where PSS divides such pages among them; PSS is the fairer of the two.
The published loaderx 2.8.6 runs the same loop in its own virtual environment
(``.venv-peer``) with ``np.from_dlpack`` as consumer, since torch is not installed
there; its peak PSS has no torch in it, so compare its loader PSS, not its peak.

Before the loaders, it runs ``scripts/bench_sampler.py`` (the Sampler against NumPy
and the published 2.8.6; ``--quick``: one short round) and prints its tables.

``--json PATH`` also writes the results for ``scripts/plot_benchmarks.py`` (a
throughput against loader memory plot per workload).

Usage: python scripts/bench.py [--quick] [--workers 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import one_bench_at_a_time
from loaderx_bench.memory import PSS_FIELDS, PeakMemory, tree_pss_kib
from loaderx_bench.paths import REPO
from loaderx_bench.report import finish_results, start_results, table, write_results
from loaderx_bench.workers import emit, peer_python, run_worker, worker_env

BATCH = 256


# -- data ------------------------------------------------------------------------


def dense_source(quick: bool, work: Path) -> tuple[Path, str]:
    real = REPO / "data" / "vision" / "dense_images.npy"
    if real.exists() and not quick:
        return real, "real photographs (scripts/prepare_vision.py)"
    n = 600 if quick else 2500
    rng = np.random.default_rng(7)
    base = rng.integers(0, 255, (n, 3, 28, 28), dtype=np.uint8)
    images = np.repeat(np.repeat(base, 8, axis=2), 8, axis=3)  # blocky, image-like
    path = work / "dense_images.npy"
    np.save(path, images)
    return path, f"synthetic uint8 images, {n} records"


def ragged_source(quick: bool, work: Path) -> tuple[Path, Path, str]:
    real = REPO / "data" / "tokens"
    if (real / "tokens.npy").exists() and not quick:
        return real / "tokens.npy", real / "offsets.npy", "real GPT-2 tokens (prepare_tokens.py)"
    n = 20_000 if quick else 100_000
    rng = np.random.default_rng(8)
    lengths = np.clip(rng.lognormal(np.log(130), 0.7, n), 16, 512).astype(np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = (rng.zipf(1.2, offsets[-1]) % 50257).astype(np.int32)
    np.save(work / "tokens.npy", tokens)
    np.save(work / "offsets.npy", offsets)
    return work / "tokens.npy", work / "offsets.npy", f"synthetic Zipf tokens, {n} records"


def build_stores(dense: Path, tokens: Path, offsets: Path, work: Path) -> None:
    from loaderx.zrecord import Dense, Ragged, RaggedBatch

    images = np.load(dense, mmap_mode="r")
    with Dense.create(work / "dense", images.dtype, images.shape[1:], codec="raw") as w:
        w.append(images)
    toks, offs = np.load(tokens, mmap_mode="r"), np.load(offsets)
    lengths = np.diff(offs).astype(np.uint64).reshape(-1, 1)
    cu = (offs - offs[0]).astype(np.int32)
    with Ragged.create(work / "ragged", toks.dtype, ndim=1, codec="raw") as w:
        w.append(RaggedBatch(np.ascontiguousarray(toks[offs[0] : offs[-1]]), cu, lengths))


# -- checking without leaving a trace ----------------------------------------------


def _npy_layout(path: str) -> tuple[int, np.dtype, tuple[int, ...]]:
    """Data offset, dtype and shape of a C-ordered ``.npy`` file."""
    fmt = np.lib.format
    with open(path, "rb") as f:
        major, _ = fmt.read_magic(f)
        read = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
        shape, fortran, dtype = read(f)
        assert not fortran, f"{path}: Fortran-ordered"
        return f.tell(), dtype, shape


def npy_rows(path: str, ranges) -> np.ndarray:
    """The rows ``start:stop`` of the array in a ``.npy`` file for each
    ``(start, stop)`` in ``ranges``, concatenated. Read with ``os.preadv`` straight
    into a new array, without mapping the file: the check of the first batch must
    leave no mapped pages (they would count in the process's PSS) and nothing but
    a temporary."""
    offset, dtype, shape = _npy_layout(path)
    ranges = [(int(a), int(b)) for a, b in ranges]
    out = np.empty((sum(b - a for a, b in ranges), *shape[1:]), dtype)
    row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
    flat = out.reshape(-1).view(np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        at = 0
        for a, b in ranges:
            n = (b - a) * row_bytes
            got = os.preadv(fd, [memoryview(flat[at : at + n])], offset + a * row_bytes)
            assert got == n, f"{path}: short read"
            at += n
    finally:
        os.close(fd)
    return out


def expected_batch(args: argparse.Namespace, ids) -> np.ndarray:
    """The source's records at ``ids``: dense images, or ragged tokens concatenated."""
    ids = [int(i) for i in ids]
    if args.kind == "dense":
        return npy_rows(args.dense, [(i, i + 1) for i in ids])
    bounds = npy_rows(args.offsets, [(i, i + 2) for i in ids]).reshape(-1, 2)
    return npy_rows(args.tokens, bounds)


# -- workers (each runs in a fresh process) ----------------------------------------


def timed(batches, check, warmup: int, steps: int, baseline: dict[str, int]) -> dict:
    it = iter(batches)
    check(next(it))
    for _ in range(warmup):
        next(it)
    with PeakMemory() as mem:
        start = time.perf_counter()
        for _ in range(steps):
            next(it)
        elapsed = time.perf_counter() - start
    loader = {k: (mem.peak[k] - baseline[k]) / 1024 for k in PSS_FIELDS}
    return {
        "batches_s": steps / elapsed,
        "peak_pss_mib": mem.peak["Pss"] / 1024,
        "loader_pss_mib": loader["Pss"],
        "loader_anon_mib": loader["Pss_Anon"],
        "loader_file_mib": loader["Pss_File"],
        "loader_shmem_mib": loader["Pss_Shmem"],
        "peak_rss_mib": mem.peak_rss / 1024,
        "loader_rss_mib": (mem.peak_rss - baseline["Rss"]) / 1024,
    }


def peer_stores(args: argparse.Namespace, work: Path) -> Path:
    """Builds the published loaderx's own raw stores (its format differs from ours)
    with its public API, once per run."""
    from loaderx.zrecord import Dense, Ragged, RaggedBatch

    root = work / "peer"
    target = root / args.kind
    if target.exists():
        return root
    if args.kind == "dense":
        images = np.load(args.dense, mmap_mode="r")
        with Dense.create(str(target), images.dtype, images.shape[1:], codec="raw") as w:
            w.append(np.ascontiguousarray(images))
    else:
        toks, offs = np.load(args.tokens, mmap_mode="r"), np.load(args.offsets)
        recs = [np.array(toks[a:b]) for a, b in zip(offs[:-1], offs[1:], strict=True)]
        with Ragged.create(str(target), toks.dtype, ndim=1, codec="raw") as w:
            w.append(RaggedBatch.from_records(recs))
    return root


def loaderx_batches(work: Path, kind: str, workers: int, consumer: str):
    """Batches from a Loader: (values..., indices) as torch or NumPy arrays."""
    from loaderx.dataloader import Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense, Ragged

    if consumer == "torch":
        import torch

        convert = torch.from_dlpack
    else:
        convert = np.from_dlpack
    path = str(work / kind)
    reader = Dense.open(path) if kind == "dense" else Ragged.open(path)
    sampler = Sampler(len(reader), BATCH, Sampler.Mode.IID, seed=1)
    drawn: list[np.ndarray] = []

    def transform(shards):
        v = shards[0]["x"]
        if kind == "dense":
            return convert(v)
        return convert(v.values), convert(v.cu_seqlens), convert(v.shapes)

    class Recording:  # remembers the first draws so the first batch can be checked
        def next(self):
            idx = sampler.next()
            if not drawn:
                drawn.append(idx.copy())
            return idx

    # In-flight batches are matched to torch's defaults: a DataLoader with w workers
    # and prefetch_factor=2 keeps 2 * w batches requested ahead of the consumer; a
    # Loader keeps workers + prefetch claimed ahead of it, so prefetch = w gives the
    # same 2 * w (4 at --workers 2). With workers=0 both are synchronous and
    # prefetch is unused (the Loader needs it >= 1).
    loader = Loader(
        {"x": [reader]}, Recording(), transform=transform, workers=workers, prefetch=max(workers, 1)
    )
    return loader, drawn


def torch_batches(dense: str, tokens: str, offsets: str, kind: str, workers: int):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __init__(self) -> None:
            self.a = np.load(dense, mmap_mode="r")

        def __len__(self) -> int:
            return len(self.a)

        def __getitem__(self, i):
            return torch.from_numpy(np.array(self.a[i])), i

    class Tokens(Dataset):
        def __init__(self) -> None:
            self.t = np.load(tokens, mmap_mode="r")
            self.o = np.load(offsets)

        def __len__(self) -> int:
            return len(self.o) - 1

        def __getitem__(self, i):
            return torch.from_numpy(np.array(self.t[self.o[i] : self.o[i + 1]])), i

    def pack(items):
        recs = [r for r, _ in items]
        lengths = torch.tensor([len(r) for r in recs], dtype=torch.int64)
        cu = torch.zeros(len(recs) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(lengths, 0)
        shapes = lengths.to(torch.uint64).reshape(-1, 1)
        return torch.cat(recs), cu, shapes, [i for _, i in items]

    def stack(items):
        return torch.stack([r for r, _ in items]), [i for _, i in items]

    ds = Images() if kind == "dense" else Tokens()
    return DataLoader(
        ds,
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        collate_fn=stack if kind == "dense" else pack,
        persistent_workers=workers > 0,
        prefetch_factor=2 if workers else None,
    )


def worker_main(args: argparse.Namespace) -> None:
    # Libraries are imported, and the published loaderx's stores built, before the
    # baseline is taken: the loader PSS is what the data path adds to that.
    if args.consumer == "torch":
        import torch  # noqa: F401
        import torch.utils.data  # noqa: F401
    work = Path(args.work)
    if args.backend != "torch":
        import loaderx.dataloader  # noqa: F401
        import loaderx.sampler  # noqa: F401
        import loaderx.zrecord  # noqa: F401

        if args.backend == "peer":
            work = peer_stores(args, work)
    baseline = tree_pss_kib()
    steps, warmup = args.steps, args.warmup

    def check(got, cu, ids) -> None:
        """The first batch against the source; everything it reads is freed."""
        want = expected_batch(args, ids)
        assert np.array_equal(np.asarray(got), want), "first batch differs from the source"
        assert cu is None or int(cu[-1]) == len(want), "cu_seqlens does not end at the length"

    if args.backend == "torch":
        batches = torch_batches(args.dense, args.tokens, args.offsets, args.kind, args.workers)

        def check_torch(batch) -> None:
            if args.kind == "dense":
                check(batch[0], None, batch[1])
            else:
                check(batch[0], batch[1], batch[3])

        result = timed(_endless(batches), check_torch, warmup, steps, baseline)
    else:
        loader, drawn = loaderx_batches(work, args.kind, args.workers, args.consumer)

        def check_loaderx(batch) -> None:
            if args.kind == "dense":
                check(batch, None, drawn[0])
            else:
                check(batch[0], batch[1], drawn[0])

        with loader:
            result = timed(loader, check_loaderx, warmup, steps, baseline)
    emit(result)


def _endless(loader):
    while True:
        yield from loader


# -- driver ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small data, few steps (~1 min)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--consumer", default="torch", help=argparse.SUPPRESS)
    ap.add_argument("--dense", help=argparse.SUPPRESS)
    ap.add_argument("--tokens", help=argparse.SUPPRESS)
    ap.add_argument("--offsets", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=10, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return
    results = start_results("bench", quick=args.quick, workers=args.workers, batch=BATCH)
    started = time.perf_counter()
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(prefix="loaderx-bench-") as tmp:
        # The sampler that draws every step, against NumPy and the published 2.8.6
        # (scripts/bench_sampler.py, which also runs alone with more options).
        sampler_opts = ["--rounds", "1", "--blocks", "5"] if args.quick else []
        print("\nsampler (scripts/bench_sampler.py):", flush=True)
        sampler_cmd = [sys.executable, "-m", "loaderx_bench.sampler", *sampler_opts]
        subprocess.run(sampler_cmd, check=True, env=worker_env())
        print(flush=True)
        work = Path(tmp)
        dense, dense_note = dense_source(args.quick, work)
        tokens, offsets, tok_note = ragged_source(args.quick, work)
        build_stores(dense, tokens, offsets, work)
        peer, peer_note = peer_python(None)
        steps = {"dense": 20 if args.quick else 200, "ragged": 2000 if args.quick else 10000}
        notes = {"dense": f"uint8 (3, 224, 224) images, {dense_note}", "ragged": tok_note}
        print(f"dense: {dense_note}; ragged: {tok_note}; batch {BATCH}; workers {args.workers}")
        w = args.workers
        # (row name, interpreter, backend, consumer, workers)
        backends = [
            (f"loaderx, workers={w}", sys.executable, "loaderx", "torch", w),
            ("loaderx, workers=0", sys.executable, "loaderx", "torch", 0),
            (f"torch DataLoader, workers={w}", sys.executable, "torch", "torch", w),
        ]
        if peer is not None:
            backends.append((f"loaderx {peer_note}, workers={w}", str(peer), "peer", "numpy", w))
        else:
            print(f"published loaderx: not measured ({peer_note})")
        for kind in ("dense", "ragged"):
            rows = []
            for name, python, backend, consumer, workers in backends:
                argv = ["-m", __spec__.name, "--worker", "--work", str(work)]
                argv += ["--backend", backend]
                argv += ["--kind", kind, "--consumer", consumer, "--dense", str(dense)]
                argv += ["--tokens", str(tokens), "--offsets", str(offsets)]
                argv += ["--workers", str(workers), "--steps", str(steps[kind])]
                row = {"label": name, "backend": backend, "consumer": consumer, "workers": workers}
                try:
                    row.update(status="ok", **run_worker(python, argv))
                except RuntimeError as e:
                    row.update(status="failed", reason=str(e))
                rows.append(row)
            base = next((r for r in rows if r["backend"] == "torch"), None)
            for r in rows:
                if r["status"] == "ok" and base is not None and base["status"] == "ok":
                    r["speed_vs_torch"] = r["batches_s"] / base["batches_s"]
                    r["memory_vs_torch"] = r["loader_pss_mib"] / base["loader_pss_mib"]
                    r["rss_vs_torch"] = r["loader_rss_mib"] / base["loader_rss_mib"]
            title = f"{kind}: {steps[kind]} timed batches of {BATCH}, workers={w}; {notes[kind]}"
            results["workloads"][kind] = {"info": {"title": title}, "rows": rows}
            print(f"\n{kind}: {steps[kind]} timed batches of {BATCH}")
            print(render(rows), flush=True)
            if args.json:
                write_results(args.json, results)
    finish_results(results, started, args.json)


def render(rows: list[dict]) -> str:
    """The workload's table: loader PSS is split into its anonymous, mapped-file and
    shared-memory parts (at the peak sample, so the parts add up to it); loader RSS
    is the RSS sum's peak minus its baseline."""
    headers = ["backend", "batches/s", "peak PSS MiB", "loader PSS MiB", "anon MiB"]
    headers += ["file MiB", "shmem MiB", "loader RSS MiB", "speed vs torch"]
    headers += ["loader PSS vs torch", "loader RSS vs torch"]
    lines = []
    for r in rows:
        if r["status"] != "ok":
            lines.append([r["label"], r["status"], r["reason"][:70], *[""] * 8])
            continue
        mib = [f"{r[k]:.0f}" for k in ("peak_pss_mib", "loader_pss_mib")]
        mib += [f"{r[f'loader_{k}_mib']:.0f}" for k in ("anon", "file", "shmem", "rss")]
        ratios = ("speed_vs_torch", "memory_vs_torch", "rss_vs_torch")
        ratios = [f"{r[k]:.2f}x" if k in r else "" for k in ratios]
        lines.append([r["label"], f"{r['batches_s']:.1f}", *mib, *ratios])
    return table(headers, lines)


if __name__ == "__main__":
    main()
