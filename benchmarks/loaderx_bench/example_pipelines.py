"""Per-step time of each example's input pipeline: loaderx's Loader against a torch
DataLoader over the same records exported to ``.npy`` files. No model runs: the
consumer only takes the next batch.

Workloads, from the examples' prepared data (``examples/word2vec``, reduced size:
``data/word2vec/reduced``; ``examples/data2latent``, reduced size:
``data/data2latent-small``; where a store is missing, the example's ``prepare.py``
builds it at the reduced size in a temporary folder):

- ``word2vec padded``: centers (Dense int32) + padded contexts (Dense int32 (16,)),
  batch 256; torch reads ``centers.npy`` and one ``(N, 16)`` matrix.
- ``word2vec packed``: centers + packed contexts (Ragged int32), batch 256; torch
  reads ``values.npy`` + ``offsets.npy`` and collates values + ``cu_seqlens``.
- ``data2latent dense``: Dense uint8 (3, 224, 224) (zstd, as prepare.py writes
  it), batch 4; torch reads one ``(N, 3, 224, 224)`` ``.npy``.
- ``data2latent ragged``: Ragged uint8 CHW at native resolution (zstd), batch 4;
  torch reads one ``.npy`` per record and collates a packed tensor
  (flattened values + ``cu_seqlens`` + shapes), the layout loaderx delivers.

Both pipelines follow the same SEQUENTIAL order: the torch DataLoader's batch
sampler yields the positions of a loaderx ``Sampler`` in SEQUENTIAL mode, the one
the Loader draws from. Every ``.npy`` is opened with ``np.load(mmap_mode='r')``.
The Loader runs with the examples' batch size and its default workers and
prefetch, and its transform turns each buffer into a torch tensor with
``torch.from_dlpack``; the DataLoader runs with ``num_workers`` 0 and 2.

Before timing, the first steps of every pipeline are compared with the Loader's,
array by array. Then each round times ``--steps`` steps of every pipeline in
turn (interleaved), after ``WARMUP`` untimed steps that drain what each pipeline
prefetched while the others ran; the table gives the median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time
from loaderx_bench.paths import REPO
from loaderx_bench.report import table

WORD2VEC_BATCH = 256  # examples/word2vec/train.py --batch default
DATA2LATENT_BATCH = 4  # examples/data2latent/README.md, reduced size
WORD2VEC_PREPARE = ["--max-words", "60000", "--vocab", "2048"]  # run.py "reduced"
DATA2LATENT_PREPARE = ["--photos", "2"]  # README.md, reduced size
WARMUP = 12  # more than either pipeline keeps in flight (Loader default 4 + 4)
CHECK_STEPS = 10  # steps compared before timing (covers a wrap-around at batch 4)


def ensure_data(tmp: Path) -> tuple[Path, Path]:
    """The word2vec and data2latent data folders, prepared at the reduced size into
    `tmp` where the repository's data/ lacks them."""
    w2v = REPO / "data" / "word2vec" / "reduced"
    if not all(
        (w2v / "stores" / s).is_dir() for s in ("center", "context_padded", "context_packed")
    ):
        w2v = tmp / "word2vec"
        script = REPO / "examples" / "word2vec" / "prepare.py"
        subprocess.run(
            [sys.executable, str(script), "--out", str(w2v), *WORD2VEC_PREPARE], check=True
        )
    d2l = REPO / "data" / "data2latent-small"
    if not all((d2l / s).is_dir() for s in ("dense", "ragged")):
        d2l = tmp / "data2latent"
        script = REPO / "examples" / "data2latent" / "prepare.py"
        subprocess.run(
            [sys.executable, str(script), "--out", str(d2l), *DATA2LATENT_PREPARE], check=True
        )
    return w2v, d2l


def export(w2v: Path, d2l: Path, npy: Path) -> dict[str, int]:
    """Writes the stores' records as a torch user would have them; returns record counts."""
    from loaderx.zrecord import Dense, Ragged

    npy.mkdir(parents=True, exist_ok=True)
    s = w2v / "stores"
    with (
        Dense.open(s / "center") as c,
        Dense.open(s / "context_padded") as d,
        Ragged.open(s / "context_packed") as r,
    ):
        np.save(npy / "centers.npy", np.from_dlpack(c[:]))
        np.save(npy / "padded.npy", np.from_dlpack(d[:]))
        b = r[:]
        np.save(npy / "values.npy", np.from_dlpack(b.values))
        np.save(npy / "offsets.npy", np.from_dlpack(b.cu_seqlens).astype(np.int64))
        n_w2v = len(c)
    with Dense.open(d2l / "dense") as d, Ragged.open(d2l / "ragged") as r:
        np.save(npy / "images.npy", np.from_dlpack(d[:]))
        (npy / "ragged").mkdir(exist_ok=True)
        for i, t in enumerate(r[:].to_tensors()):
            np.save(npy / "ragged" / f"{i:06d}.npy", np.from_dlpack(t))
        n_d2l = len(d)
    return {"word2vec": n_w2v, "data2latent": n_d2l}


class SamplerBatches:
    """A torch batch sampler yielding a loaderx Sampler's positions, forever."""

    def __init__(self, n: int, batch: int) -> None:
        self.n, self.batch = n, batch

    def __iter__(self) -> Iterator[list[int]]:
        from loaderx.sampler import Sampler

        s = Sampler(self.n, self.batch, Sampler.Mode.SEQUENTIAL)
        while True:
            yield s.next().tolist()  # next() reuses its buffer: tolist copies


def loaderx_pipeline(workload: str, w2v: Path, d2l: Path):
    """An open Loader whose steps are tuples of torch tensors, and what to close."""
    import torch

    from loaderx.dataloader import Loader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense, Ragged

    def packed(rb) -> tuple:
        return (
            torch.from_dlpack(rb.values),
            torch.from_dlpack(rb.cu_seqlens),
            torch.from_dlpack(rb.shapes),
        )

    s = w2v / "stores"
    if workload == "word2vec padded":
        readers = [Dense.open(s / "center"), Dense.open(s / "context_padded")]
        batch = WORD2VEC_BATCH

        def transform(shards):
            sh = shards[0]
            return torch.from_dlpack(sh["center"]), torch.from_dlpack(sh["context"])

    elif workload == "word2vec packed":
        readers = [Dense.open(s / "center"), Ragged.open(s / "context_packed")]
        batch = WORD2VEC_BATCH

        def transform(shards):
            sh = shards[0]
            return (torch.from_dlpack(sh["center"]), *packed(sh["context"])[:2])

    elif workload == "data2latent dense":
        readers = [Dense.open(d2l / "dense")]
        batch = DATA2LATENT_BATCH

        def transform(shards):
            return (torch.from_dlpack(shards[0]["image"]),)

    else:
        readers = [Ragged.open(d2l / "ragged")]
        batch = DATA2LATENT_BATCH

        def transform(shards):
            return packed(shards[0]["image"])

    names = ("center", "context") if workload.startswith("word2vec") else ("image",)
    streams = {k: [r] for k, r in zip(names, readers, strict=True)}
    sampler = Sampler(len(readers[0]), batch, Sampler.Mode.SEQUENTIAL)
    loader = Loader(streams, sampler, transform=transform)  # default workers, prefetch

    def close() -> None:
        loader.close()
        for r in readers:
            r.close()

    return loader, close


def torch_pipeline(workload: str, npy: Path, n: int, workers: int):
    """An iterator over a torch DataLoader's batches (tuples of tensors), and what to close."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Padded(Dataset):
        def __init__(self) -> None:
            self.c = np.load(npy / "centers.npy", mmap_mode="r")
            self.x = np.load(npy / "padded.npy", mmap_mode="r")

        def __len__(self) -> int:
            return len(self.c)

        def __getitem__(self, i):
            return torch.from_numpy(np.array(self.c[i])), torch.from_numpy(np.array(self.x[i]))

    class Packed(Dataset):
        def __init__(self) -> None:
            self.c = np.load(npy / "centers.npy", mmap_mode="r")
            self.v = np.load(npy / "values.npy", mmap_mode="r")
            self.o = np.load(npy / "offsets.npy", mmap_mode="r")

        def __len__(self) -> int:
            return len(self.c)

        def __getitem__(self, i):
            lo, hi = int(self.o[i]), int(self.o[i + 1])
            return torch.from_numpy(np.array(self.c[i])), torch.from_numpy(np.array(self.v[lo:hi]))

    class Images(Dataset):
        def __init__(self) -> None:
            self.a = np.load(npy / "images.npy", mmap_mode="r")

        def __len__(self) -> int:
            return len(self.a)

        def __getitem__(self, i):
            return torch.from_numpy(np.array(self.a[i]))

    class RaggedImages(Dataset):
        def __init__(self) -> None:
            self.files = sorted((npy / "ragged").glob("*.npy"))

        def __len__(self) -> int:
            return len(self.files)

        def __getitem__(self, i):
            return torch.from_numpy(np.array(np.load(self.files[i], mmap_mode="r")))

    def cu_of(lengths: list[int]) -> torch.Tensor:
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int64), 0)
        return cu

    def stack_pairs(items):
        return torch.stack([c for c, _ in items]), torch.stack([x for _, x in items])

    def pack_pairs(items):
        recs = [x for _, x in items]
        return torch.stack([c for c, _ in items]), torch.cat(recs), cu_of([len(r) for r in recs])

    def stack(items):
        return (torch.stack(items),)

    def pack_images(items):
        shapes = torch.tensor([list(t.shape) for t in items], dtype=torch.uint64)
        return (
            torch.cat([t.reshape(-1) for t in items]),
            cu_of([t.numel() for t in items]),
            shapes,
        )

    ds, collate, batch = {
        "word2vec padded": (Padded, stack_pairs, WORD2VEC_BATCH),
        "word2vec packed": (Packed, pack_pairs, WORD2VEC_BATCH),
        "data2latent dense": (Images, stack, DATA2LATENT_BATCH),
        "data2latent ragged": (RaggedImages, pack_images, DATA2LATENT_BATCH),
    }[workload]
    dl = DataLoader(
        ds(),
        batch_sampler=SamplerBatches(n, batch),
        num_workers=workers,
        collate_fn=collate,
        persistent_workers=workers > 0,
        prefetch_factor=2 if workers else None,
    )
    it = iter(dl)

    def close() -> None:
        if hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    return it, close


def same(a: tuple, b: tuple) -> bool:
    """Equal dtypes, shapes and bytes (compared in NumPy: torch's uint64 lacks ops)."""
    return len(a) == len(b) and all(
        x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(a, b, strict=True)
    )


def time_steps(it: Iterator, steps: int) -> float:
    for _ in range(WARMUP):
        next(it)
    t = time.perf_counter()
    for _ in range(steps):
        batch = next(it)
        del batch
    return (time.perf_counter() - t) / steps


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; median reported")
    p.add_argument("--steps", type=int, default=200, help="timed steps per round, word2vec")
    p.add_argument("--image-steps", type=int, default=50, help="timed steps per round, data2latent")
    p.add_argument("--dir", help="where to write the .npy files (default: a temporary folder)")
    args = p.parse_args(argv)
    with one_bench_at_a_time():
        return run(args)


def run(args: argparse.Namespace) -> int:
    import torch

    print(f"Machine: {machine()}, torch {torch.__version__}")
    print(f"Checkout: {checkout()}")
    print(f"Load average at start: {load_average()}")
    tmp = Path(tempfile.mkdtemp(prefix="loaderx-examples-"))
    npy = Path(args.dir) if args.dir else tmp / "npy"
    opened: list[Callable[[], None]] = []
    rows = []
    try:
        w2v, d2l = ensure_data(tmp)
        counts = export(w2v, d2l, npy)
        print(f"data: {w2v} ({counts['word2vec']:,} records), {d2l} ({counts['data2latent']})")
        workloads = (
            "word2vec padded",
            "word2vec packed",
            "data2latent dense",
            "data2latent ragged",
        )
        kinds = ("loaderx", "torch w0", "torch w2")
        times: dict[tuple[str, str], list[float]] = {}
        pipes: dict[tuple[str, str], Iterator] = {}
        for wl in workloads:
            n = counts[wl.split()[0]]
            loader, close = loaderx_pipeline(wl, w2v, d2l)
            opened.append(close)
            pipes[wl, "loaderx"] = loader
            for w in (0, 2):
                it, close = torch_pipeline(wl, npy, n, w)
                opened.append(close)
                pipes[wl, f"torch w{w}"] = it
            # The first steps must be the same arrays from every pipeline.
            for step in range(CHECK_STEPS):
                want = tuple(np.array(x) for x in next(pipes[wl, "loaderx"]))
                for k in kinds[1:]:
                    got = tuple(np.asarray(x) for x in next(pipes[wl, k]))
                    if not same(want, got):
                        raise SystemExit(f"{wl}: {k} differs from loaderx at step {step}")
            print(f"{wl}: the first {CHECK_STEPS} steps are identical in all three pipelines")
        for r in range(args.rounds):
            for wl in workloads:
                steps = args.steps if wl.startswith("word2vec") else args.image_steps
                for k in kinds:
                    times.setdefault((wl, k), []).append(time_steps(pipes[wl, k], steps))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        for wl in workloads:
            ms = {k: statistics.median(times[wl, k]) * 1e3 for k in kinds}
            rows.append(
                [
                    wl,
                    f"{ms['loaderx']:.3f}",
                    f"{ms['torch w0']:.3f}",
                    f"{ms['torch w2']:.3f}",
                    f"{ms['torch w0'] / ms['loaderx']:.1f}x / "
                    f"{ms['torch w2'] / ms['loaderx']:.1f}x",
                ]
            )
        result = {"rounds": args.rounds, "times_s": {f"{w}|{k}": v for (w, k), v in times.items()}}
    finally:
        for close in opened:
            close()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(
        table(
            [
                "workload",
                "loaderx ms/step",
                "torch workers=0 ms/step",
                "torch workers=2 ms/step",
                "ratio torch/loaderx (workers=0 / workers=2)",
            ],
            rows,
        )
    )
    print(f"\nLoad average at end: {load_average()}")
    print(json.dumps(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
