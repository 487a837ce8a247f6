"""Compare the latent stores encode.py wrote: Dense vs Ragged in each framework,
torch vs JAX in each layout. Prints the largest absolute difference of each pair
present and exits with status 1 if one exceeds its tolerance (common.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from common import FRAMEWORK_ATOL, LAYOUT_ATOL

from loaderx.zrecord import Dense

PAIRS = [
    ("torch-dense", "torch-ragged", LAYOUT_ATOL),
    ("jax-dense", "jax-ragged", LAYOUT_ATOL),
    ("torch-dense", "jax-dense", FRAMEWORK_ATOL),
    ("torch-ragged", "jax-ragged", FRAMEWORK_ATOL),
]


def load(path: Path) -> np.ndarray:
    with Dense.open(path) as ds:
        return np.from_dlpack(ds[:]).copy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/data2latent", help="what prepare.py wrote")
    args = ap.parse_args()
    root = Path(args.data) / "latents"
    found = {p.name: load(p) for p in sorted(root.iterdir())} if root.is_dir() else {}
    if not found:
        print(f"no latent stores under {root}; run encode.py first")
        return 1
    with Dense.open(Path(args.data) / "ids") as ids:
        n = len(ids)
    ok = True
    for name, lat in found.items():
        scale = float(np.abs(lat).max())
        print(f"{name:13s} {lat.shape[0]} records, max |latent| {scale:.3g}")
        ok &= lat.shape[0] == n
    compared = 0
    for a, b, atol in PAIRS:
        if a in found and b in found:
            diff = float(np.abs(found[a] - found[b]).max())
            good = diff <= atol
            ok &= good
            compared += 1
            bound = "exact" if atol == 0 else f"tolerance {atol:g}"
            print(f"{a:13s} vs {b:13s} max |diff| {diff:.3g} ({bound}) {'ok' if good else 'FAIL'}")
    if not compared:
        print("no pair to compare: encode both layouts, or both frameworks")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
