"""Encode every image of a prepared data set into a latent, exactly once, in record
order, through loaderx's endless Loader and a frozen convolutional encoder.

  --layout dense    reads the Dense store of 224 x 224 crops
  --layout ragged   reads the native-resolution Ragged store and resizes each record
                    in the framework, with the same resize+crop prepare.py used
  --allocator cuda  places the gathered batches in CUDA device memory
                    (loaderx.allocator.cuda, reader.bind); the framework reads them
                    there through DLPack

The latents go to a new Dense store, float32 (8, 28, 28), record i encoding image i
(default: DATA/latents/FRAMEWORK-LAYOUT). Afterwards a few records are encoded one
at a time and compared with what the store holds.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
from backends import make_backend
from common import LATENT, SINGLE_ATOL

from loaderx.dataloader import Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged


def cuda_allocator():
    """loaderx's CUDA allocator, or a clear exit when this machine has no usable
    CUDA runtime or device."""
    from loaderx.allocator import cuda

    try:
        return cuda.Allocator(0)
    except (RuntimeError, ValueError) as e:  # no runtime found, or it found no device
        raise SystemExit(f"--allocator cuda: {e}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/data2latent", help="what prepare.py wrote")
    ap.add_argument("--framework", choices=("torch", "jax"), required=True)
    ap.add_argument("--layout", choices=("dense", "ragged"), required=True)
    ap.add_argument("--allocator", choices=("host", "cuda"), default="host")
    ap.add_argument("--batch", type=int, default=16, help="records per step")
    ap.add_argument("--workers", type=int, default=2, help="loader worker threads")
    ap.add_argument("--out", help="latent store to write (default DATA/latents/FRAMEWORK-LAYOUT)")
    args = ap.parse_args()
    data = Path(args.data)
    out = Path(args.out or data / "latents" / f"{args.framework}-{args.layout}")

    # The allocator first: its error says what is missing on this machine.
    allocator = cuda_allocator() if args.allocator == "cuda" else None
    backend = make_backend(args.framework, "cuda" if allocator else "cpu")

    store = Dense.open(data / "dense") if args.layout == "dense" else Ragged.open(data / "ragged")
    ids = Dense.open(data / "ids")
    n, batch = len(ids), args.batch
    if len(store) != n:
        raise SystemExit(f"{data}: {len(store)} images but {n} ids; rerun prepare.py")
    # Device placement is per reader: the images go where the allocator puts them,
    # the ids (one int64 per record, checked on the host) stay in host memory.
    images = store.bind(allocator) if allocator else store
    to_batch = backend.dense_images if args.layout == "dense" else backend.ragged_images

    def transform(shards):
        # Runs on a loader worker thread, so the Ragged resize overlaps the encoder.
        shard = shards[0]
        return to_batch(shard["image"]), np.from_dlpack(shard["id"]).copy()

    if out.exists():
        Dense.open(out).close()  # refuse to remove anything that is not a store
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)

    # SEQUENTIAL draws positions (step * batch + j) % n: records 0..n-1 in order,
    # then the loader goes on forever, wrapping around to 0.
    sampler = Sampler(n, batch, Sampler.Mode.SEQUENTIAL)
    steps = -(-n // batch)  # ceil(n / batch) steps cover every record once
    streams = {"image": [images], "id": [ids]}
    times = []
    with (
        Loader(streams, sampler, transform=transform, workers=args.workers, prefetch=2) as loader,
        Dense.create(out, np.float32, LATENT, codec="raw") as writer,
    ):
        for step in range(steps):
            t0 = time.perf_counter()
            x, got = next(loader)
            latents = backend.to_host(backend.encode(x))
            keep = batch
            if step == steps - 1 and n % batch:
                # The last step is a partial one. The loader never ends, so this
                # global batch is full: its first n % batch positions are the last
                # records, the rest have wrapped around to records 0, 1, ... that
                # step 0 already encoded. Keep only the first n % batch.
                keep = n % batch
                assert np.array_equal(got[keep:], np.arange(n, (step + 1) * batch) % n), got
            # The ids stream proves which records this step delivered: the next
            # `keep` records, in order.
            assert np.array_equal(got[:keep], np.arange(step * batch, step * batch + keep)), got
            writer.append(np.ascontiguousarray(latents[:keep]))
            times.append(time.perf_counter() - t0)
        # Stop here: leaving the block closes the loader, whose workers may already
        # be gathering the steps after the last one.

    with Dense.open(out) as lat:
        assert len(lat) == n, (len(lat), n)
        stored = np.from_dlpack(lat[:])

    # Record i of the store must be the encoding of image i on its own: encode a few
    # records one at a time (a batch of one, through the same input path) and compare.
    # They include the first and last records and both ends of the partial step.
    check = sorted({0, 1, batch - 1, batch, n // 2, (steps - 1) * batch, n - 1} & set(range(n)))
    single = max(
        float(np.abs(backend.to_host(backend.encode(to_batch(images[[i]])))[0] - stored[i]).max())
        for i in check
    )
    assert single <= SINGLE_ATOL, f"a record encoded alone differs by {single} > {SINGLE_ATOL}"
    exact = ""
    if args.layout == "ragged":
        # The resize inside the Ragged path gives the Dense store's bytes exactly.
        with Dense.open(data / "dense") as dense:
            for i in check:
                resized = backend.to_host(backend.ragged_images(images[[i]]))[0]
                assert np.array_equal(resized, np.from_dlpack(dense[i])), f"record {i}"
        exact = f"; resized Ragged records {check} equal the Dense store's bytes"
    store.close()
    ids.close()

    rest = times[1:] or times
    print(
        f"[{args.framework}/{args.layout}/{args.allocator}] {n} records in {steps} steps of "
        f"{batch} (the last keeps {n - (steps - 1) * batch}): first step {times[0] * 1e3:.0f} ms "
        f"({'warm-up, compiling' if args.framework == 'jax' else 'warm-up'}), "
        f"then median {np.median(rest) * 1e3:.1f} ms/step, "
        f"{n / sum(times):.1f} images/s overall"
    )
    print(
        f"  {out}: Dense float32 {LATENT}, {n} records, ids 0..{n - 1} in order; records "
        f"{check} encoded alone: max |diff| {single:.3g} (tolerance {SINGLE_ATOL:g}){exact}"
    )


if __name__ == "__main__":
    main()
