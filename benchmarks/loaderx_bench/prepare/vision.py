"""Build the real-photo benchmark data (dense 224x224 crops and ragged native images).

Sources are photographs shipped in Debian packages (fetched with ``apt-get download`` and
unpacked with ``dpkg-deb -x``; nothing is installed) plus the photos bundled in the
scikit-image wheel. Candidates come from curated per-package path allow-lists; an automatic
check then drops transparent cut-outs, grayscale images, flat-colour graphics and exact
duplicates. Every exclusion is listed with its reason in ``metadata.json``.

Outputs (default ``data/vision/``):
  dense_images.npy    uint8 (2500, 3, 224, 224)  one center crop per photo + seeded random crops
  ragged_values.npy   uint8 (sum of 3*H*W,)      each photo at native resolution, CHW, packed
  ragged_offsets.npy  int64 (n + 1,)             element offsets into ragged_values
  ragged_shapes.npy   uint64 (n, 3)              (3, H, W) per photo
  metadata.json       sources, versions, transforms, per-record provenance, exclusions, SHA-256

See docs/datasets.md.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loaderx_bench.paths import DATA
from loaderx_bench.prepare.debian import get_package, relpath_str, unique_files
from loaderx_bench.prepare.outputs import array_summary, outputs_match, save_array, write_json
from loaderx_bench.prepare.progress import Timer, die, log
from loaderx_bench.prepare.rcc import iter_rcc

try:
    from PIL import Image
except ImportError:  # pragma: no cover - message for a missing dev dependency
    die("Pillow is required: pip install Pillow")

Image.MAX_IMAGE_PIXELS = None  # some wallpapers exceed Pillow's decompression-bomb guard

FORMAT_VERSION = 1
N_DENSE = 2500
CROP = 224
RESIZE_SHORT = 256
MAX_LONG_SIDE = 3300
DERIVED_MIN_SHORT = 600  # photos with at least this short side supply the extra random crops
RESAMPLE = Image.Resampling.BILINEAR
RESAMPLE_DOC = (
    "Pillow Image.resize(resample=Image.Resampling.BILINEAR, reducing_gap=None): Pillow's "
    "separable convolution resampler, whose bilinear kernel is widened by the scale factor "
    "when downscaling (i.e. antialiased)"
)

# Automatic photo check thresholds (see photo_check()).
TRANSPARENT_MAX_FRACTION = 0.01
GRAY_MAX_CHROMA = 2.0
FLAT_TOP16_MIN = 0.35
FLAT_BLOCKS_MIN = 0.15
MIN_SHORT_SIDE = 128

# --------------------------------------------------------------------------- candidate lists

# gcompris-qt-data: activities whose bundled WebP images are photographs.
GCOMPRIS_PHOTO_BUNDLES = {
    "categorization": "photos of tools, monuments, fish, renewable energy, objects",
    "erase": "wildlife photos",
    "explore_monuments": "photos of monuments",
    "explore_world_animals": "wildlife photos",
    "explore_farm_animals": "farm animal photos",
    "explore_world_music": "photos of musicians and instruments",
}
GCOMPRIS_OTHER_REASON = {
    "paintings": "reproductions of paintings (artwork)",
    "details": "fragments of paintings (artwork)",
    "babyshapes": "painting fragments and cut-outs on transparent backgrounds",
    "lang": "cartoon drawings",
    "clickgame": "cartoon fish on transparent backgrounds",
    "solar_system": "planet renderings/composites on transparent backgrounds",
    "louis-braille": "mixed illustrations, scans and portraits",
    "chronos": "cartoon story frames",
    "leftright": "hand photos cut out on transparent backgrounds",
}

# lomiri wallpapers: visually reviewed; these are digital artwork, not photographs.
LOMIRI_NOT_PHOTOS = {
    "umang_by_Abhishek_Mudgal.jpg": "digital colour-gradient artwork",
    "Fossa_by_Jasper_Roks.jpg": "digital artwork",
    "Infinite-Sea_by_Aury88.jpg": "digital composite artwork",
    "Painting-Colors_by__herobrine7gamer.jpg": "flat-colour stripes artwork",
}

# plasma-workspace-wallpapers: the wallpapers that are photographs (the largest size of each).
PLASMA_PHOTOS = [
    "BytheWater",
    "ColdRipple",
    "ColorfulCups",
    "DarkestHour",
    "EveningGlow",
    "FallenLeaf",
    "Grey",
    "Kite",
    "OneStandsOut",
    "Path",
    "summer_1am",
]

# opencv-doc examples/data: files that are not photographs of real scenes.
OPENCV_NOT_PHOTOS = {
    "Blender_Suzanne1.jpg": "3D render",
    "Blender_Suzanne2.jpg": "3D render",
    "HappyFish.jpg": "cartoon",
    "LinuxLogo.jpg": "logo",
    "WindowsLogo.jpg": "logo",
    "aloeGT.png": "disparity ground-truth map",
    "blox.jpg": "3D render",
    "cards.png": "drawing",
    "chessboard.png": "synthetic pattern",
    "detect_blob.png": "drawing",
    "digits.png": "handwritten digit sheet",
    "ela_modified.jpg": "digitally tampered copy of ela_original.jpg",
    "ellipses.jpg": "synthetic pattern",
    "gradient.png": "synthetic gradient",
    "imageTextN.png": "scanned text",
    "imageTextR.png": "scanned text",
    "licenseplate_motion.jpg": "synthetic motion blur",
    "mask.png": "mask",
    "ml.png": "cartoon",
    "notes.png": "sheet music",
    "opencv-logo-white.png": "logo",
    "opencv-logo.png": "logo",
    "pca_test1.jpg": "drawing",
    "pic1.png": "drawing",
    "pic2.png": "drawing",
    "pic3.png": "drawing",
    "pic4.png": "drawing",
    "pic5.png": "drawing",
    "pic6.png": "drawing",
    "starry_night.jpg": "painting (artwork)",
    "templ.png": "template cut-out",
    "text_defocus.jpg": "synthetic defocus blur",
    "text_motion.jpg": "synthetic motion blur",
    "tmpl.png": "template cut-out",
}

# scikit-image data: files that are not photographs of real scenes.
SKIMAGE_NOT_PHOTOS = {
    "chessboard_GRAY.png": "synthetic pattern",
    "chessboard_RGB.png": "synthetic pattern",
    "clock_motion.png": "synthetic motion blur",
    "color.png": "synthetic colour chart",
    "horse.png": "silhouette",
    "logo.png": "logo",
    "page.png": "scanned text",
    "phantom.png": "synthetic phantom",
    "text.png": "scanned text",
}

PACKAGES = [
    "gcompris-qt-data",
    "stellarium-data",
    "scratch",
    "opencv-doc",
    "lomiri-wallpapers-16.04",
    "lomiri-wallpapers-20.04",
    "mate-backgrounds",
    "plasma-workspace-wallpapers",
]

IMAGE_EXT = (".jpg", ".jpeg", ".png", ".webp", ".gif")


@dataclass
class Candidate:
    package: str  # Debian package name, or "scikit-image" for the wheel's data
    path: str  # logical source path (inside the package / wheel; rcc entries use '!')
    file: str  # file to decode (in the cache)


def _files(root: Path, sub: str, exts=IMAGE_EXT) -> list[Path]:
    base = root / sub
    if not base.is_dir():
        return []
    # Symlinks are skipped: plasma wallpapers link their smaller sizes to the largest file.
    return [p for p in unique_files(base.rglob("*")) if p.suffix.lower() in exts]


def enumerate_candidates(pkg: str, root: Path, cache: Path, excluded: list) -> list[Candidate]:
    """Apply the path allow-lists of one unpacked package; append path-level exclusions."""
    out: list[Candidate] = []

    def cand(p: Path, logical: str | None = None) -> Candidate:
        return Candidate(pkg, logical or relpath_str(p, root), str(p))

    def drop(path: str, reason: str, count: int = 1) -> None:
        excluded.append({"package": pkg, "path": path, "count": count, "reason": reason})

    if pkg == "gcompris-qt-data":
        rcc_dir = root / "usr/share/gcompris-qt/rcc"
        dest = cache / "rcc" / root.name
        for rcc in sorted(rcc_dir.glob("*.rcc")):
            bundle = rcc.stem
            rel = relpath_str(rcc, root)
            n_images = 0
            if bundle in GCOMPRIS_PHOTO_BUNDLES:
                stamp = dest / bundle / ".extracted"
                if not stamp.exists():
                    for path, data in iter_rcc(rcc.read_bytes()):
                        if path.lower().endswith(".webp"):
                            f = dest / bundle / path.lstrip("/")
                            f.parent.mkdir(parents=True, exist_ok=True)
                            f.write_bytes(data)
                    stamp.parent.mkdir(parents=True, exist_ok=True)
                    stamp.write_text("")
                for f in sorted((dest / bundle).rglob("*.webp")):
                    inner = "/" + f.relative_to(dest / bundle).as_posix()
                    out.append(Candidate(pkg, f"{rel}!{inner}", str(f)))
                continue
            for path, _ in iter_rcc(rcc.read_bytes(), with_data=False):
                if path.lower().endswith(IMAGE_EXT):
                    n_images += 1
            if n_images:
                reason = GCOMPRIS_OTHER_REASON.get(
                    bundle, "activity images are drawings/diagrams, not photographs"
                )
                drop(f"{rel}!*", reason, n_images)
        return out

    if pkg == "stellarium-data":
        return [cand(p) for p in _files(root, "usr/share/stellarium/nebulae/default", (".png",))]

    if pkg == "scratch":
        for p in _files(root, "usr/share/scratch/Media/Backgrounds"):
            if p.suffix.lower() == ".jpg":
                out.append(cand(p))
            else:
                drop(relpath_str(p, root), "GIF/PNG backgrounds in this package are drawings")
        return out

    if pkg == "opencv-doc":
        for p in _files(root, "usr/share/doc/opencv-doc/examples/data"):
            if p.parent.name != "data":
                continue
            if p.name in OPENCV_NOT_PHOTOS:
                drop(relpath_str(p, root), OPENCV_NOT_PHOTOS[p.name])
            else:
                out.append(cand(p))
        return out

    if pkg.startswith("lomiri-wallpapers"):
        for p in _files(root, "usr/share/backgrounds"):
            if p.name in LOMIRI_NOT_PHOTOS:
                drop(relpath_str(p, root), LOMIRI_NOT_PHOTOS[p.name])
            else:
                out.append(cand(p))
        return out

    if pkg == "mate-backgrounds":
        base = "usr/share/backgrounds/mate"
        for p in _files(root, base):
            if p.parent.name == "nature":
                out.append(cand(p))
        others = [p for p in _files(root, base) if p.parent.name != "nature"]
        if others:
            drop(f"{base}/{{abstract,desktop}}/*", "abstract/desktop artwork", len(others))
        return out

    if pkg == "plasma-workspace-wallpapers":
        wall = root / "usr/share/wallpapers"
        n_other = 0
        n_same = 0
        for d in sorted(p for p in wall.iterdir() if p.is_dir()):
            if d.name not in PLASMA_PHOTOS:
                n_other += 1
                continue
            imgs = _files(d, "contents/images")
            n_same += len(list((d / "contents/images").iterdir())) - 1
            sizes = {}
            for f in imgs:
                with Image.open(f) as im:
                    sizes[f] = im.size[0] * im.size[1]
            best = max(imgs, key=lambda f: (sizes[f], f.name))
            out.append(cand(best))
        if n_other:
            drop(
                "usr/share/wallpapers/<other wallpapers>",
                "digital artwork (Autumn and Volna are painted/rendered; the rest abstract)",
                n_other,
            )
        drop(
            "usr/share/wallpapers/<photo>/contents/images/<other files>",
            "the same photo again (symlink or smaller size); the largest file is used",
            n_same,
        )
        return out

    raise ValueError(pkg)


def skimage_candidates(excluded: list) -> tuple[list[Candidate], dict]:
    try:
        import skimage
        import skimage.data
    except ImportError:
        log("  scikit-image is not installed: skipping its bundled photos")
        return [], {}
    d = Path(skimage.data.__file__).parent
    out = []
    for p in sorted(d.iterdir()):
        if p.suffix.lower() not in (".png", ".jpg"):
            continue
        path = f"skimage/data/{p.name}"
        if p.name in SKIMAGE_NOT_PHOTOS:
            excluded.append(
                {
                    "package": "scikit-image",
                    "path": path,
                    "count": 1,
                    "reason": SKIMAGE_NOT_PHOTOS[p.name],
                }
            )
        else:
            out.append(Candidate("scikit-image", path, str(p)))
    return out, {"package": "scikit-image", "version": skimage.__version__, "source": "wheel"}


# --------------------------------------------------------------------------- image work


def load_rgb(file: str) -> tuple[Image.Image, dict]:
    """Decode ``file``; return an RGB image and facts about the original (mode, alpha)."""
    im = Image.open(file)
    im.load()
    info = {"mode": im.mode, "format": im.format}
    transparent = 0.0
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA", "PA"):
        a = np.asarray(im.getchannel("A"))
        transparent = float((a < 255).mean())
    elif im.mode in ("I;16", "I", "F"):
        info["note"] = "high bit depth"
    info["transparent_fraction"] = round(transparent, 4)
    rgb = im.convert("RGB")
    return rgb, info


def photo_check(rgb: Image.Image, transparent: float) -> tuple[list[str], dict]:
    """The automatic check. Returns (reasons to exclude, measured statistics).

    Measured on the image box-reduced by an integer factor to a long side <= 1024:
    - chroma: mean over pixels of max(R,G,B) - min(R,G,B); below 2 the image is grayscale.
    - top16: share of the non-clipped pixels (4x4 block mean in [16, 239]) taken by the 16
      most frequent exact RGB colours.
    - flat_blocks: share of non-clipped 4x4 blocks whose pixels are all exactly equal.
    Flat-colour graphics (drawings, cartoons, logos) have top16 >= 0.35 and
    flat_blocks >= 0.15; photographs, whose sensor noise and shading vary every pixel, rarely
    do. Near-black/near-white blocks are left out so that telescope photos (black sky) and
    product shots (white background) are judged on their subject.
    """
    w, h = rgb.size
    f = max(1, max(w, h) // 1024)
    small = rgb.reduce(f) if f > 1 else rgb
    a = np.asarray(small)
    ai = a.astype(np.int16)
    chroma = float((ai.max(-1) - ai.min(-1)).mean())
    H, W = (a.shape[0] // 4) * 4, (a.shape[1] // 4) * 4
    b = ai[:H, :W].reshape(H // 4, 4, W // 4, 4, 3).transpose(0, 2, 1, 3, 4)
    b = b.reshape(H // 4, W // 4, 16, 3)
    block_range = (b.max(2) - b.min(2)).max(-1)
    block_mean = b.mean((2, 3))
    clipped = (block_mean < 16) | (block_mean > 239)
    n_ok = max(int((~clipped).sum()), 1)
    flat_blocks = float(((block_range == 0) & ~clipped).sum()) / n_ok
    pm = ai.mean(-1)
    keep = (pm >= 16) & (pm <= 239)
    key = (a[..., 0].astype(np.int64) << 16) | (a[..., 1].astype(np.int64) << 8) | a[..., 2]
    kept = np.sort(key[keep])
    n_keep = int(kept.size)
    if n_keep:
        starts = np.flatnonzero(np.r_[True, kept[1:] != kept[:-1]])
        counts = np.diff(np.r_[starts, n_keep])
        top = np.sort(counts)[-16:]
        top16 = float(top.sum()) / n_keep
    else:
        top16 = 0.0
    stats = {
        "chroma": round(chroma, 2),
        "top16": round(top16, 3),
        "flat_blocks": round(flat_blocks, 3),
        "clipped": round(float(clipped.mean()), 3),
    }
    reasons = []
    if transparent > TRANSPARENT_MAX_FRACTION:
        reasons.append(f"transparent cut-out ({transparent:.0%} of pixels not opaque)")
    if min(w, h) < MIN_SHORT_SIDE:
        reasons.append(f"too small ({w}x{h}; short side < {MIN_SHORT_SIDE})")
    if chroma < GRAY_MAX_CHROMA:
        reasons.append(f"grayscale (mean chroma {chroma:.2f} < {GRAY_MAX_CHROMA})")
    if top16 >= FLAT_TOP16_MIN and flat_blocks >= FLAT_BLOCKS_MIN:
        reasons.append(
            f"flat-colour graphics (top16 {top16:.2f} >= {FLAT_TOP16_MIN}, "
            f"flat blocks {flat_blocks:.2f} >= {FLAT_BLOCKS_MIN})"
        )
    return reasons, stats


def capped(rgb: Image.Image) -> tuple[Image.Image, bool]:
    w, h = rgb.size
    if max(w, h) <= MAX_LONG_SIDE:
        return rgb, False
    s = MAX_LONG_SIDE / max(w, h)
    size = (max(1, round(w * s)), max(1, round(h * s)))
    return rgb.resize(size, RESAMPLE, reducing_gap=None), True


def center_crop(rgb: Image.Image) -> tuple[np.ndarray, dict]:
    """Short side -> 256 (bilinear, antialiased), then the central 224x224; CHW uint8."""
    w, h = rgb.size
    s = RESIZE_SHORT / min(w, h)
    rw, rh = (RESIZE_SHORT, round(h * s)) if w <= h else (round(w * s), RESIZE_SHORT)
    r = rgb.resize((rw, rh), RESAMPLE, reducing_gap=None)
    left, top = (rw - CROP) // 2, (rh - CROP) // 2
    c = r.crop((left, top, left + CROP, top + CROP))
    arr = np.asarray(c).transpose(2, 0, 1)
    sx, sy = w / rw, h / rh
    box = [left * sx, top * sy, (left + CROP) * sx, (top + CROP) * sy]
    return np.ascontiguousarray(arr), {
        "resize_to": [rw, rh],
        "crop": [left, top, left + CROP, top + CROP],
        "box": [round(v, 3) for v in box],
    }


def box_crop(rgb: Image.Image, box: list[int]) -> np.ndarray:
    c = rgb.resize((CROP, CROP), RESAMPLE, box=tuple(box), reducing_gap=None)
    return np.ascontiguousarray(np.asarray(c).transpose(2, 0, 1))


def pass1(file: str) -> dict:
    """Decode, check, center-crop one candidate (runs in a worker process)."""
    raw = Path(file).read_bytes()
    res = {"file_sha256": hashlib.sha256(raw).hexdigest()}
    try:
        rgb, info = load_rgb(file)
    except Exception as e:  # noqa: BLE001 - any decode failure excludes the file
        res["reasons"] = [f"decode failed: {e}"]
        return res
    res.update(info)
    res["width"], res["height"] = rgb.size
    reasons, stats = photo_check(rgb, info["transparent_fraction"])
    res["stats"] = stats
    res["reasons"] = reasons
    if reasons:
        return res
    res["pixel_sha256"] = hashlib.sha256(rgb.tobytes()).hexdigest()
    big, down = capped(rgb)
    res["stored_size"] = list(big.size)
    res["downscaled"] = down
    res["center"], res["center_info"] = center_crop(rgb)
    return res


def pass2(job: tuple) -> list[np.ndarray]:
    """Write one photo's native (capped) CHW pixels into the ragged memmap; make its extra
    random crops. Runs in a worker process."""
    file, values_path, offset, boxes = job
    rgb, _ = load_rgb(file)
    big, _ = capped(rgb)
    chw = np.asarray(big).transpose(2, 0, 1)
    mm = np.load(values_path, mmap_mode="r+")
    mm[offset : offset + chw.size] = chw.reshape(-1)
    mm.flush()
    del mm
    return [box_crop(rgb, b) for b in boxes]


# --------------------------------------------------------------------------- main


def plan_derived(photos: list[dict], n_needed: int, seed: int) -> list[tuple[int, list[int]]]:
    """Seeded random crops: (photo index, integer source box) pairs.

    Eligible photos have a short side >= DERIVED_MIN_SHORT. They are visited in seeded
    random order, cycling, so each gives ceil or floor of n_needed / n_eligible crops. A crop
    is a square of side c, log-uniform in [224, 0.875 * short side] (0.875 = 224/256, the
    center crop's scale), at a uniform random position, resized to 224x224.
    """
    rng = np.random.default_rng(seed)
    eligible = [
        i for i, p in enumerate(photos) if min(p["width"], p["height"]) >= DERIVED_MIN_SHORT
    ]
    if not eligible and n_needed:
        raise RuntimeError("no photo is large enough for derived crops")
    order: list[int] = []
    while len(order) < n_needed:
        order.extend(rng.permutation(eligible).tolist())
    plan = []
    for i in order[:n_needed]:
        w, h = photos[i]["width"], photos[i]["height"]
        hi = (CROP / RESIZE_SHORT) * min(w, h)
        c = int(round(math.exp(rng.uniform(math.log(CROP), math.log(hi)))))
        x = int(rng.integers(0, w - c + 1))
        y = int(rng.integers(0, h - c + 1))
        plan.append((i, [x, y, x + c, y + c]))
    return plan


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DATA / "vision")
    ap.add_argument("--cache", type=Path, default=DATA / "cache")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--force", action="store_true", help="rebuild even if outputs match")
    args = ap.parse_args(argv)
    out: Path = args.out
    cache: Path = args.cache
    timer = Timer()

    config = {
        "format_version": FORMAT_VERSION,
        "seed": args.seed,
        "n_dense": N_DENSE,
        "crop": CROP,
        "resize_short": RESIZE_SHORT,
        "max_long_side": MAX_LONG_SIDE,
        "derived_min_short": DERIVED_MIN_SHORT,
    }
    arrays = {
        "dense_images.npy": "dense_images",
        "ragged_values.npy": "ragged_values",
        "ragged_offsets.npy": "ragged_offsets",
        "ragged_shapes.npy": "ragged_shapes",
    }
    if not args.force and outputs_match(out, arrays, {"config": config}):
        log(f"vision: {out} is up to date (arrays match metadata.json); --force rebuilds")
        timer.lap("verified existing outputs")
        return
    out.mkdir(parents=True, exist_ok=True)

    log("vision: fetching and unpacking packages")
    packages, candidates, excluded, unavailable = [], [], [], []
    for pkg in PACKAGES:
        try:
            root, info = get_package(pkg, cache)
        except RuntimeError as e:
            log(f"  {pkg}: unavailable ({e})")
            unavailable.append({"package": pkg, "error": str(e)})
            continue
        found = enumerate_candidates(pkg, root, cache, excluded)
        info["candidates"] = len(found)
        packages.append(info)
        candidates.extend(found)
        log(f"  {pkg} {info['version']}: {len(found)} candidate images")
    sk, sk_info = skimage_candidates(excluded)
    if sk_info:
        sk_info["candidates"] = len(sk)
        packages.append(sk_info)
        candidates.extend(sk)
        log(f"  scikit-image {sk_info['version']}: {len(sk)} candidate images")
    timer.lap(f"{len(candidates)} candidates")

    log(f"vision: decoding and checking {len(candidates)} candidates ({args.jobs} processes)")
    with ProcessPoolExecutor(args.jobs) as ex:
        results = list(ex.map(pass1, [c.file for c in candidates], chunksize=4))
    photos: list[dict] = []
    centers: list[np.ndarray] = []
    seen: dict[str, str] = {}
    for c, r in zip(candidates, results, strict=True):
        src = {"package": c.package, "path": c.path}
        if not r["reasons"] and r["pixel_sha256"] in seen:
            r["reasons"] = [f"exact duplicate of {seen[r['pixel_sha256']]}"]
        if r["reasons"]:
            excluded.append(
                {**src, "count": 1, "reason": "; ".join(r["reasons"]), "stats": r.get("stats")}
            )
            continue
        seen[r["pixel_sha256"]] = f"{c.package}:{c.path}"
        photos.append(
            {
                **src,
                "file": c.file,
                "file_sha256": r["file_sha256"],
                "mode": r["mode"],
                "width": r["width"],
                "height": r["height"],
                "stored_shape": [3, r["stored_size"][1], r["stored_size"][0]],
                "downscaled": r["downscaled"],
                "stats": r["stats"],
                "center_info": r["center_info"],
            }
        )
        centers.append(r["center"])
    n_auto = sum(1 for e in excluded if "stats" in e)
    timer.lap(f"{len(photos)} photos kept, {n_auto} excluded by the automatic check")
    if len(photos) > N_DENSE:
        die(f"{len(photos)} photos exceed the dense set size {N_DENSE}")

    plan = plan_derived(photos, N_DENSE - len(photos), args.seed)
    boxes: list[list[list[int]]] = [[] for _ in photos]
    for i, b in plan:
        boxes[i].append(b)

    shapes = np.array([p["stored_shape"] for p in photos], dtype=np.uint64)
    sizes = shapes.prod(axis=1).astype(np.int64)
    offsets = np.zeros(len(photos) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    values_tmp = out / "ragged_values.tmp.npy"
    np.lib.format.open_memmap(values_tmp, mode="w+", dtype=np.uint8, shape=(int(offsets[-1]),))
    log(f"vision: writing ragged set ({offsets[-1] / 1e9:.2f} GB) and {len(plan)} random crops")
    jobs = [(p["file"], str(values_tmp), int(offsets[i]), boxes[i]) for i, p in enumerate(photos)]
    with ProcessPoolExecutor(args.jobs) as ex:
        derived_crops = list(ex.map(pass2, jobs, chunksize=2))
    os.replace(values_tmp, out / "ragged_values.npy")
    timer.lap("ragged set and random crops")

    dense = np.empty((N_DENSE, 3, CROP, CROP), dtype=np.uint8)
    records = []
    for i, p in enumerate(photos):
        dense[i] = centers[i]
        records.append({"source": i, "derived": False, **p["center_info"]})
    k = len(photos)
    for i in range(len(photos)):
        for b, crop in zip(boxes[i], derived_crops[i], strict=True):
            dense[k] = crop
            records.append({"source": i, "derived": True, "box": b})
            k += 1
    assert k == N_DENSE

    summaries = {"dense_images": save_array(out / "dense_images.npy", dense)}
    summaries["ragged_offsets"] = save_array(out / "ragged_offsets.npy", offsets)
    summaries["ragged_shapes"] = save_array(out / "ragged_shapes.npy", shapes)
    values = np.load(out / "ragged_values.npy", mmap_mode="r")
    summaries["ragged_values"] = array_summary(values)
    timer.lap("saved arrays and hashed payloads")

    import PIL

    by_pkg: dict[str, int] = {}
    for p in photos:
        by_pkg[p["package"]] = by_pkg.get(p["package"], 0) + 1
    for info in packages:
        info["photos"] = by_pkg.get(info["package"], 0)
    sources = []
    for i, p in enumerate(photos):
        s = {k: v for k, v in p.items() if k not in ("file", "center_info")}
        s["index"] = i
        s["derived_crops"] = len(boxes[i])
        sources.append(s)
    hw = shapes[:, 1:].astype(np.int64)
    meta = {
        "dataset": "loaderx real-photo benchmark set",
        "config": config,
        "generator": "scripts/prepare_vision.py",
        "pillow_version": PIL.__version__,
        "numpy_version": np.__version__,
        "packages": packages,
        "unavailable_packages": unavailable,
        "counts": {
            "candidates": len(candidates),
            "photos": len(photos),
            "dense_records": N_DENSE,
            "dense_center_crops": len(photos),
            "dense_derived_crops": len(plan),
            "ragged_records": len(photos),
            "ragged_downscaled": int(sum(p["downscaled"] for p in photos)),
            "excluded_files": int(sum(e["count"] for e in excluded)),
        },
        "photos_per_package": by_pkg,
        "transform": {
            "decode": "Pillow Image.open(...).convert('RGB'); palette/gray/alpha images "
            "converted to 8-bit RGB (alpha dropped; images with > 1% non-opaque pixels are "
            "excluded)",
            "resample": RESAMPLE_DOC,
            "dense_center": f"resize so the short side is {RESIZE_SHORT} (long side rounded), "
            f"then the central {CROP}x{CROP} crop (offset floor((size-{CROP})/2)); CHW uint8",
            "dense_derived": f"seeded (numpy default_rng({args.seed})) square crop of side c, "
            f"log-uniform in [{CROP}, 0.875 * short side], uniform position, from photos with "
            f"short side >= {DERIVED_MIN_SHORT}, resized to {CROP}x{CROP} with the box "
            "argument of Image.resize; CHW uint8",
            "ragged": f"native resolution CHW uint8; photos whose long side exceeds "
            f"{MAX_LONG_SIDE} px are downscaled so that the long side is {MAX_LONG_SIDE} "
            "(other side rounded); rows listed in ragged_shapes, element offsets in "
            "ragged_offsets",
            "record_order": "dense: one center crop per photo in source order, then the "
            "derived crops grouped by source photo; ragged: source order",
        },
        "photo_check": {
            "description": photo_check.__doc__.strip(),
            "thresholds": {
                "transparent_max_fraction": TRANSPARENT_MAX_FRACTION,
                "gray_max_chroma": GRAY_MAX_CHROMA,
                "flat_top16_min": FLAT_TOP16_MIN,
                "flat_blocks_min": FLAT_BLOCKS_MIN,
                "min_short_side": MIN_SHORT_SIDE,
            },
        },
        "ragged_stats": {
            "height": {"min": int(hw[:, 0].min()), "max": int(hw[:, 0].max())},
            "width": {"min": int(hw[:, 1].min()), "max": int(hw[:, 1].max())},
            "pixels_mean": float((hw[:, 0] * hw[:, 1]).mean()),
            "bytes": int(offsets[-1]),
        },
        "arrays": summaries,
        "sources": sources,
        "dense_records": records,
        "excluded": excluded,
    }
    write_json(out / "metadata.json", meta)
    log(
        f"vision: {len(photos)} photos from {len(by_pkg)} sources -> {N_DENSE} dense records "
        f"({len(plan)} derived), ragged {offsets[-1] / 1e9:.2f} GB; "
        f"{meta['counts']['excluded_files']} files excluded"
    )
    for k2, v in sorted(by_pkg.items()):
        log(f"  {k2:32s} {v:4d} photos")
    log(f"vision: done in {timer.total():.1f}s -> {out}")


if __name__ == "__main__":
    main()
