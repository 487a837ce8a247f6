"""Build Zrecord stores from a small real dataset and load batches from them.

The dataset is scikit-learn's bundled copy of the UCI handwritten digits
(1,797 8x8 images with labels), so nothing is downloaded. The script writes:

  OUT/digits/image   Dense uint8 (8, 8)   the pixel intensities 0..16
  OUT/digits/label   Dense int64 ()       the digit
  OUT/digits/ink     Ragged int32 ndim 2  (k, 2) row/col of each pixel >= 8

for each codec, checks every record read back against the source, then draws
random batches and reports how fast they arrive.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
from sklearn.datasets import load_digits

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


def read_rate(root: str, batch: int, seconds: float) -> tuple[float, float]:
    """Records per second for random batches of all three streams."""
    rng = np.random.default_rng(0)
    with (
        Dense.open(f"{root}/image") as im,
        Dense.open(f"{root}/label") as lb,
        Ragged.open(f"{root}/ink") as rs,
    ):
        n, steps, start = len(im), 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            idx = rng.integers(0, n, batch, dtype=np.int64)
            im.gather(idx), lb.gather(idx), rs.gather(idx)
            steps += 1
        elapsed = time.perf_counter() - start
    return steps * batch / elapsed, elapsed / steps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/demo", help="where to write the stores")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=1.0, help="time spent reading per codec")
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
        rate, latency = read_rate(root, args.batch, args.seconds)
        print(
            f"[{codec}] wrote {root}/{{image,label,ink}} in {built * 1e3:.1f} ms "
            f"({', '.join(f'{k} {v / 1024:.1f} KiB' for k, v in sizes.items())}); "
            f"every record verified"
        )
        print(
            f"[{codec}] random batches of {args.batch}: {rate / 1e3:,.0f} krecords/s "
            f"(image + label + ink), {latency:.0f} us per batch"
        )


if __name__ == "__main__":
    main()
