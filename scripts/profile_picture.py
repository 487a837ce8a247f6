"""The picture in docs/loader.md, "Reading the statistics": ``loaderx profile``
over a zstd store of the real benchmark images with a normalising transform.

Writes the first 1,000 images of ``data/vision/dense_images.npy``
(``scripts/prepare_vision.py``) to ``data/profile/images-zstd`` once, then runs
the command, which prints its summary and advice and draws
``docs/img/profile-images-zstd.png``. Run with the checkout's venv:
``.venv/bin/python scripts/profile_picture.py``.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import numpy as np

from loaderx.__main__ import main
from loaderx.zrecord import Dense

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "data" / "vision" / "dense_images.npy"
STORE = REPO / "data" / "profile" / "images-zstd"
PICTURE = REPO / "docs" / "img" / "profile-images-zstd.png"
RECORDS = 1000


def normalize(shards: list[dict[str, object]]) -> list[np.ndarray]:
    """uint8 CHW images to float32 in [0, 1], as a training step would take them."""
    return [np.from_dlpack(s["images-zstd"]).astype(np.float32) / 255.0 for s in shards]


def run() -> int:
    if not SOURCE.is_file():
        print(f"{SOURCE} is missing: run scripts/prepare_vision.py first", file=sys.stderr)
        return 1
    if not STORE.exists():
        images = np.load(SOURCE, mmap_mode="r")[:RECORDS]
        STORE.parent.mkdir(parents=True, exist_ok=True)
        with Dense.create(STORE, images.dtype, images.shape[1:], codec="zstd") as w:
            w.append(np.ascontiguousarray(images))
    print(f"Machine: {os.cpu_count()} cores, {platform.machine()}, {platform.python_version()}")
    argv = ["profile", str(STORE), "--batch-size", "64", "--steps", "150", "--workers", "2"]
    return main([*argv, "--transform", "__main__:normalize", "--png", str(PICTURE)])


if __name__ == "__main__":
    raise SystemExit(run())
