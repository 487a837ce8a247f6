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
fresh process: correctness is checked on the first batches, then after a warm-up
the timed steps run while a sampler thread records the peak PSS (proportional set
size, so pages shared between a parent and its forked workers count once) of the
process and all its children. "loader PSS" is that peak minus the PSS measured
after the imports (torch alone maps over 500 MiB) and before the loader is built:
the memory the data path itself costs. The published loaderx 2.8.6 runs the same loop in
its own virtual environment (``.venv-peer``) with ``np.from_dlpack`` as consumer,
since torch is not installed there.

Usage: python scripts/bench.py [--quick] [--workers 2] [--sampler]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import REPO, emit, machine, one_bench_at_a_time, peer_python, run_worker, table  # noqa: E402

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


# -- process-tree memory -----------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pss_kib() -> int:
    """PSS of this process and all its descendants."""
    pids, total = [os.getpid()], 0
    while pids:
        p = pids.pop()
        total += _pss_kib(p)
        pids += _children(p)
    return total


class PeakPss:
    """Samples the PSS of this process tree every 20 ms."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_kib = max(self.peak_kib, tree_pss_kib())

    def __enter__(self) -> PeakPss:
        self.peak_kib = tree_pss_kib()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kib = max(self.peak_kib, tree_pss_kib())


# -- workers (each runs in a fresh process) ----------------------------------------


def timed(batches, check, warmup: int, steps: int, baseline_kib: int) -> dict:
    it = iter(batches)
    check(next(it))
    for _ in range(warmup):
        next(it)
    with PeakPss() as mem:
        start = time.perf_counter()
        for _ in range(steps):
            next(it)
        elapsed = time.perf_counter() - start
    return {
        "batches_per_s": steps / elapsed,
        "peak_pss_mib": mem.peak_kib / 1024,
        "data_pss_mib": (mem.peak_kib - baseline_kib) / 1024,
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
    if args.consumer == "torch":
        import torch  # noqa: F401  (imported before the baseline is taken)
    baseline = tree_pss_kib()
    work = Path(args.work)
    steps, warmup = args.steps, args.warmup
    if args.backend == "torch":
        src = np.load(args.dense, mmap_mode="r")
        toks, offs = np.load(args.tokens, mmap_mode="r"), np.load(args.offsets)

        def check(batch):
            if args.kind == "dense":
                x, ids = batch
                assert np.array_equal(x.numpy(), src[ids])
            else:
                values, cu, _, ids = batch
                want = np.concatenate([toks[offs[i] : offs[i + 1]] for i in ids])
                assert np.array_equal(values.numpy(), want) and cu[-1] == len(want)

        batches = torch_batches(args.dense, args.tokens, args.offsets, args.kind, args.workers)
        result = timed(_endless(batches), check, warmup, steps, baseline)
    else:
        if args.backend == "peer":
            work = peer_stores(args, work)
        loader, drawn = loaderx_batches(work, args.kind, args.workers, args.consumer)
        src = np.load(args.dense, mmap_mode="r")
        toks, offs = np.load(args.tokens, mmap_mode="r"), np.load(args.offsets)

        def check(batch):
            ids = drawn[0]
            if args.kind == "dense":
                assert np.array_equal(np.asarray(batch), src[ids])
            else:
                want = np.concatenate([toks[offs[i] : offs[i + 1]] for i in ids])
                assert np.array_equal(np.asarray(batch[0]), want)

        with loader:
            result = timed(loader, check, warmup, steps, baseline)
    emit(result)


def _endless(loader):
    while True:
        yield from loader


def peer_worker_source() -> str:
    """The loop for the published loaderx, written against the spec's public API."""
    return Path(__file__).read_text()


# -- driver ----------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small data, few steps (~1 min)")
    ap.add_argument("--workers", type=int, default=2)
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
    args = ap.parse_args()
    if args.worker:
        worker_main(args)
        return
    print(f"machine: {machine()}")
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(prefix="loaderx-bench-") as tmp:
        work = Path(tmp)
        dense, dense_note = dense_source(args.quick, work)
        tokens, offsets, tok_note = ragged_source(args.quick, work)
        build_stores(dense, tokens, offsets, work)
        peer, peer_note = peer_python(None)
        steps = {"dense": 20 if args.quick else 200, "ragged": 2000 if args.quick else 10000}
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
            rows, results = [], {}
            for name, python, backend, consumer, workers in backends:
                argv = [__file__, "--worker", "--work", str(work), "--backend", backend]
                argv += ["--kind", kind, "--consumer", consumer, "--dense", str(dense)]
                argv += ["--tokens", str(tokens), "--offsets", str(offsets)]
                argv += ["--workers", str(workers), "--steps", str(steps[kind])]
                try:
                    results[name] = run_worker(python, argv)
                except RuntimeError as e:
                    rows.append([name, "failed", str(e)[:60], "", "", ""])
            base = results.get(f"torch DataLoader, workers={w}")
            for name, r in results.items():
                speed = r["batches_per_s"] / base["batches_per_s"] if base else float("nan")
                mem = r["data_pss_mib"] / base["data_pss_mib"] if base else float("nan")
                rows.append(
                    [
                        name,
                        f"{r['batches_per_s']:.1f}",
                        f"{r['peak_pss_mib']:.0f}",
                        f"{r['data_pss_mib']:.0f}",
                        f"{speed:.2f}x",
                        f"{mem:.2f}x",
                    ]
                )
            print(f"\n{kind}: {steps[kind]} timed batches of {BATCH}")
            headers = [
                "backend",
                "batches/s",
                "peak PSS MiB",
                "loader PSS MiB",
                "speed vs torch",
                "loader memory vs torch",
            ]
            print(table(headers, rows))


if __name__ == "__main__":
    main()
