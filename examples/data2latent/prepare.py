"""Build the image stores the encoder reads, from photographs bundled with
scikit-image (nothing is downloaded).

Each of the first --photos photographs (common.PHOTOS, 9 at most) gives one record
per variant in common.VARIANTS (the whole photo, a mirror image, corner and centre
crops, a portrait crop, a wide strip, a small crop, a rotation): 9 records per
photo, photo by photo. The script writes, under --out:

  dense    Dense uint8 (3, 224, 224)   each record resized so that its short side is
                                       256 (Pillow bilinear, antialiased), then the
                                       central 224 x 224 crop; CHW
  ragged   Ragged uint8 ndim 3         the same records at their own resolution, CHW
  ids      Dense int64 ()              record i holds i, so that a consumer can prove
                                       which records each step delivered
  records.json                         photo, variant and native shape per record

The resize is the rule of benchmarks/loaderx_bench/prepare/vision.py:
``Image.resize((w, h), Image.Resampling.BILINEAR, reducing_gap=None)`` to a short
side of 256 (the long side rounded), then the crop at ((w - 224) // 2, (h - 224) // 2).
encode.py applies the same resize to the Ragged records on the fly with
common.resize_crop, which this script checks against Pillow, record by record.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import PIL
from common import CROP, PHOTOS, records, resize_crop, resize_plan, resized_size
from PIL import Image

from loaderx.zrecord import Dense, Ragged, RaggedBatch


def pillow_resize_crop(hwc: np.ndarray) -> np.ndarray:
    """The Dense store's record: (H, W, 3) uint8 -> (3, 224, 224) uint8."""
    h, w = hwc.shape[:2]
    rh, rw = resized_size(h, w)
    img = Image.fromarray(hwc).resize((rw, rh), Image.Resampling.BILINEAR, reducing_gap=None)
    left, top = (rw - CROP) // 2, (rh - CROP) // 2
    crop = img.crop((left, top, left + CROP, top + CROP))
    return np.ascontiguousarray(np.asarray(crop).transpose(2, 0, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="data/data2latent", help="directory to (re)create")
    ap.add_argument(
        "--photos", type=int, default=len(PHOTOS), help=f"photographs to use, 1..{len(PHOTOS)}"
    )
    ap.add_argument("--codec", default="zstd", choices=("raw", "zstd"))
    args = ap.parse_args()
    if not 1 <= args.photos <= len(PHOTOS):
        ap.error(f"--photos must be in 1..{len(PHOTOS)}")

    out = Path(args.out)
    if out.exists():
        # Only ever remove a directory this script made (latents included: they
        # would no longer match the new images).
        if not (out / "records.json").is_file():
            raise SystemExit(f"{out} exists and was not made by prepare.py; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)

    t0 = time.perf_counter()
    recs = records(args.photos)
    n = len(recs)
    native = [np.ascontiguousarray(a.transpose(2, 0, 1)) for _, _, a in recs]  # CHW
    dense = np.stack([pillow_resize_crop(a) for _, _, a in recs])
    t_resize = time.perf_counter() - t0

    # The Ragged path's resize must reproduce these bytes exactly; check it here, in
    # NumPy, so that a Pillow that resamples differently fails now, by name.
    for i, chw in enumerate(native):
        xi, xw, yi, yw, *box = resize_plan(*chw.shape[1:])
        mine = resize_crop(
            chw, xi, xw, yi, yw, *box,
            int32=lambda x: x.astype(np.int32), uint8=lambda x: x.astype(np.uint8),
        )  # fmt: skip
        if not np.array_equal(mine, dense[i]):
            raise SystemExit(
                f"record {i} ({recs[i][0]}/{recs[i][1]}): common.resize_crop differs from "
                f"Pillow {PIL.__version__} in {int((mine != dense[i]).sum())} pixels"
            )

    with Dense.create(out / "dense", np.uint8, (3, CROP, CROP), codec=args.codec) as w:
        w.append(dense)
    with Ragged.create(out / "ragged", np.uint8, ndim=3, codec=args.codec) as w:
        w.append(RaggedBatch.from_records(native))
    with Dense.create(out / "ids", np.int64, (), codec="raw") as w:
        w.append(np.arange(n, dtype=np.int64))
    meta = [
        {"id": i, "photo": p, "variant": v, "shape": list(native[i].shape)}
        for i, (p, v, _) in enumerate(recs)
    ]
    (out / "records.json").write_text(json.dumps(meta, indent=1) + "\n")

    # Read everything back: the stores hold exactly what was appended, in order.
    with Dense.open(out / "dense") as d, Ragged.open(out / "ragged") as r:
        assert len(d) == len(r) == n
        assert np.array_equal(np.from_dlpack(d[:]), dense)
        for got, want in zip(r[:].to_tensors(), native, strict=True):
            assert np.array_equal(np.from_dlpack(got), want)

    hw = np.array([a.shape[1:] for a in native])
    print(
        f"{n} records ({args.photos} photos x {n // args.photos} variants) from scikit-image's "
        f"bundled photographs, in {time.perf_counter() - t0:.1f} s ({t_resize:.1f} s decoding "
        f"and resizing)"
    )
    print(
        f"  {out}/dense   Dense uint8 (3, {CROP}, {CROP}), {args.codec}; "
        f"{out}/ragged   Ragged uint8 CHW, native H {hw[:, 0].min()}..{hw[:, 0].max()}, "
        f"W {hw[:, 1].min()}..{hw[:, 1].max()}; {out}/ids"
    )
    print(
        f"  common.resize_crop (integer arithmetic) equals Pillow {PIL.__version__}'s "
        f"resize + crop on {n}/{n} records, byte for byte"
    )


if __name__ == "__main__":
    main()
