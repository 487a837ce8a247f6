"""Build Zrecord stores from a small real dataset and load batches from them.

The dataset is scikit-learn's bundled copy of the UCI handwritten digits
(1,797 8x8 images with labels), so nothing is downloaded. The script writes:

  OUT/digits/image   Dense uint8 (8, 8)   the pixel intensities 0..16
  OUT/digits/label   Dense int64 ()       the digit
  OUT/digits/ink     Ragged int32 ndim 2  (k, 2) row/col of each pixel >= 8

for each codec, checks every record read back against the source, then feeds
them through a Sampler and a Loader the way a training loop would and reports how
fast the batches arrive.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
from sklearn.datasets import load_digits

from loaderx.dataloader import Loader
from loaderx.sampler import Sampler
from loaderx.zrecord import Dense, Ragged, RaggedBatch


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def build(root: str, codec: str, images: np.ndarray, labels: np.ndarray, ink: list) -> None:
    with Dense.create(f"{root}/image", np.uint8, images.shape[1:], codec=codec) as w:
        w.append(images)
    with Dense.create(f"{root}/label", np.int64, (), codec=codec) as w:
        w.append(labels)
    with Ragged.create(f"{root}/ink", np.int32, ndim=2, codec=codec) as w:
        w.append(RaggedBatch.from_records(ink))


def check(root: str, images: np.ndarray, labels: np.ndarray, ink: list) -> None:
    with Dense.open(f"{root}/image") as im, Dense.open(f"{root}/label") as lb:
        assert np.array_equal(np.from_dlpack(im[:]), images)
        assert np.array_equal(np.from_dlpack(lb[:]), labels)
    with Ragged.open(f"{root}/ink") as rs:
        for got, want in zip(rs[:].to_tensors(), ink, strict=True):
            assert np.array_equal(np.from_dlpack(got), want)


def load(root: str, batch: int, steps: int) -> tuple[float, int]:
    """Records per second through the Loader: a CYCLIC sampler, three aligned
    streams split across two bindings, two worker threads."""
    readers = {
        "image": Dense.open(f"{root}/image"),
        "label": Dense.open(f"{root}/label"),
        "ink": Ragged.open(f"{root}/ink"),
    }
    streams = {name: [r, r] for name, r in readers.items()}
    sampler = Sampler(len(readers["label"]), batch, Sampler.Mode.CYCLIC, seed=42)

    def collate(shards: list[dict]) -> tuple[np.ndarray, np.ndarray, int]:
        images = np.concatenate([np.from_dlpack(s["image"]) for s in shards])
        labels = np.concatenate([np.from_dlpack(s["label"]) for s in shards])
        ink = sum(len(np.from_dlpack(s["ink"].values)) for s in shards)
        return images, labels, ink

    seen = set()
    with Loader(streams, sampler, transform=collate, workers=2, prefetch=2) as loader:
        start = time.perf_counter()
        for _, (images, labels, _ink) in zip(range(steps), loader, strict=False):
            assert images.shape == (batch, 8, 8) and labels.shape == (batch,)
            seen.update(np.unique(labels).tolist())
        elapsed = time.perf_counter() - start
        state = loader.state_dict()
    for r in readers.values():
        r.close()
    assert seen == set(range(10))
    return steps * batch / elapsed, state["step"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/demo", help="where to write the stores")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=500, help="loader steps per codec")
    args = ap.parse_args()

    digits = load_digits()
    images = digits.images.astype(np.uint8)  # values are whole numbers 0..16
    labels = digits.target.astype(np.int64)
    ink = [np.argwhere(img >= 8).astype(np.int32) for img in images]
    print(
        f"source: scikit-learn digits, {len(images)} images {images.shape[1:]}, "
        f"{sum(len(k) for k in ink)} ink pixels"
    )

    shutil.rmtree(args.out, ignore_errors=True)
    for codec in ("raw", "zstd"):
        root = f"{args.out}/{codec}/digits"
        t0 = time.perf_counter()
        build(root, codec, images, labels, ink)
        built = time.perf_counter() - t0
        check(root, images, labels, ink)
        sizes = {s: du(f"{root}/{s}") for s in ("image", "label", "ink")}
        rate, step = load(root, args.batch, args.steps)
        print(
            f"[{codec}] wrote {root}/{{image,label,ink}} in {built * 1e3:.1f} ms "
            f"({', '.join(f'{k} {v / 1024:.1f} KiB' for k, v in sizes.items())}); "
            f"every record verified"
        )
        print(
            f"[{codec}] Loader, {step} CYCLIC batches of {args.batch} (image + label + ink, "
            f"2 bindings, 2 workers): {rate / 1e3:,.0f} krecords/s"
        )


if __name__ == "__main__":
    main()
