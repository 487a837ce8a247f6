"""Hardware check of the CUDA allocator, for a machine with an NVIDIA GPU.

Run with the bench venv (it has the CUDA build of torch):

    .venv/bin/python scripts/check_gpu.py [--device 0] [--seconds 2]

It builds small Dense and Ragged stores (raw and zstd) in a temporary folder,
gathers them into ``loaderx.allocator.cuda.Allocator`` memory, imports every batch
with ``torch.from_dlpack`` and compares it on the GPU with the source, runs the
Loader with one binding per visible device, runs the data2latent example with
torch on both layouts with ``--allocator cuda`` and compares its latents with the
host run's, and then times Dense image batches
gathered straight into device memory against gathering into host memory and
copying with ``tensor.to(device)``. It prints one line per check and exits
non-zero if any fails. Nothing here runs in CI (there is no GPU there).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch  # loads the CUDA runtime, which the allocator then finds loaded

from loaderx.allocator import cuda
from loaderx.dataloader import Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged, RaggedBatch

from .paths import REPO

DATA2LATENT = REPO / "examples" / "data2latent"
# The example's tolerance between two encoders of the same batches (common.py),
# which a GPU convolution against the CPU one must also meet.
LATENT_ATOL = 1e-4

FAILED: list[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        FAILED.append(name)


def build(root: Path, rng: np.random.Generator):
    images = rng.integers(0, 255, (512, 3, 224, 224), dtype=np.uint8)
    records = [rng.integers(0, 50_000, rng.integers(1, 300), dtype=np.int32) for _ in range(4096)]
    for codec in ("raw", "zstd"):
        with Dense.create(root / f"images-{codec}", np.uint8, (3, 224, 224), codec=codec) as w:
            w.append(images)
        with Ragged.create(root / f"tokens-{codec}", np.int32, ndim=1, codec=codec) as w:
            w.append(RaggedBatch.from_records(records))
    return images, records


def correctness(root: Path, images, records, device: int) -> None:
    dev = torch.device("cuda", device)
    a = cuda.Allocator(device=device)
    print(f"runtime: {a.library}")
    idx = np.array([7, 0, 511, 7, 300], dtype=np.int64)
    for codec in ("raw", "zstd"):
        with Dense.open(root / f"images-{codec}") as ds:
            t = torch.from_dlpack(ds.bind(a)[idx])
        want = torch.from_numpy(images[idx]).to(dev)
        check(f"Dense {codec} on {t.device}", t.device == dev and torch.equal(t, want))
        with Ragged.open(root / f"tokens-{codec}") as rs:
            b = rs.bind(a)[idx]
        values = torch.from_dlpack(b.values)
        cu = torch.from_dlpack(b.cu_seqlens).cpu().numpy()
        want = np.concatenate([records[i] for i in idx])
        ok = values.device == dev and np.array_equal(values.cpu().numpy(), want)
        ok = ok and cu.tolist() == np.cumsum([0] + [len(records[i]) for i in idx]).tolist()
        check(f"Ragged {codec} values and cu_seqlens on {values.device}", ok)
    del t, values, b
    torch.cuda.synchronize(dev)
    check("no live allocations after release", a.stats().live == 0, repr(a))
    a.close()


def loader(root: Path, images) -> None:
    n = torch.cuda.device_count()
    allocs = [cuda.Allocator(device=d) for d in range(n)]
    sampler = Sampler(len(images), 16 * n, Sampler.Mode.IID, seed=3)
    with Dense.open(root / "images-zstd") as ds:
        streams = {"image": [ds.bind(a) for a in allocs]}
        with Loader(streams, sampler, workers=2, prefetch=2) as it:
            shards = next(it)
    first = Sampler(len(images), 16 * n, Sampler.Mode.IID, seed=3).next().astype(np.int64)
    ok = True
    for d, shard in enumerate(shards):
        t = torch.from_dlpack(shard["image"])
        want = torch.from_numpy(images[first[16 * d : 16 * (d + 1)]]).to(t.device)
        ok = ok and t.device == torch.device("cuda", d) and torch.equal(t, want)
    check(f"Loader places each of {n} binding(s) on its device", ok)


def data2latent(root: Path) -> None:
    """The example end to end at its reduced size, on the host and on the GPU."""
    data = root / "data2latent"

    def run(script: str, *args: object) -> bool:
        proc = subprocess.run(
            [sys.executable, str(DATA2LATENT / script), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
        return proc.returncode == 0

    if not run("prepare.py", "--out", data, "--photos", 2):
        check("data2latent prepare.py", False)
        return
    for layout in ("dense", "ragged"):
        outs = {a: data / "latents" / f"torch-{layout}-{a}" for a in ("host", "cuda")}
        ran = all(
            run(
                "encode.py",
                "--data",
                data,
                "--framework",
                "torch",
                "--layout",
                layout,
                "--allocator",
                a,
                "--out",
                out,
            )
            for a, out in outs.items()
        )
        if not ran:
            check(f"data2latent torch {layout} --allocator cuda runs", False)
            continue
        with Dense.open(outs["host"]) as h, Dense.open(outs["cuda"]) as c:
            host, dev = np.asarray(h[:]), np.asarray(c[:])
        diff = float(np.abs(host - dev).max()) if host.shape == dev.shape else float("inf")
        check(
            f"data2latent torch {layout}: --allocator cuda latents equal the host run's",
            diff <= LATENT_ATOL,
            f"max |diff| {diff:.2e} over {len(host)} records",
        )


def timing(root: Path, device: int, seconds: float) -> None:
    dev = torch.device("cuda", device)
    a = cuda.Allocator(device=device)
    rng = np.random.default_rng(0)
    with Dense.open(root / "images-raw") as ds:
        view = ds.bind(a)

        def direct(idx):
            return torch.from_dlpack(view[idx])

        def via_host(idx):
            return torch.from_dlpack(ds[idx]).to(dev)

        rates = {}
        for name, fn in (("into device memory", direct), ("host, then .to(device)", via_host)):
            fn(rng.integers(0, len(ds), 256))
            torch.cuda.synchronize(dev)
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                fn(rng.integers(0, len(ds), 256))
                n += 1
            torch.cuda.synchronize(dev)
            rates[name] = n / (time.perf_counter() - start)
            print(f"     {name}: {rates[name]:.1f} batches/s of 256 x 147 KiB")
    ratio = rates["into device memory"] / rates["host, then .to(device)"]
    print(f"     ratio: {ratio:.2f}x")
    a.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch; nothing to check")
        return 2
    print(f"device: {torch.cuda.get_device_name(args.device)}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="loaderx-gpu-") as tmp:
        root = Path(tmp)
        images, records = build(root, np.random.default_rng(1))
        correctness(root, images, records, args.device)
        loader(root, images)
        data2latent(root)
        timing(root, args.device, args.seconds)
    print("all checks passed" if not FAILED else f"FAILED: {', '.join(FAILED)}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
