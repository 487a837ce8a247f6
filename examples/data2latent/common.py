"""What prepare.py, encode.py and compare.py share: the photographs and their
variants, the resize policy, the frozen encoder's weights and the tolerances.

Nothing here imports torch or JAX. The resize is written once, against NumPy-style
array operations, and runs unchanged on NumPy arrays, torch tensors and JAX arrays;
the encoder's weights are made here and its torch and JAX forms are in backends.py.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# --------------------------------------------------------------------------- data

# The RGB photographs bundled in the scikit-image wheel, roughly smallest first, so that
# `prepare.py --photos 2` (the reduced size) is also the cheapest to encode. The
# other bundled images are grayscale, synthetic or have an alpha channel.
PHOTOS = (
    "chelsea",  # 300 x 451
    "coffee",  # 400 x 600
    "rocket",  # 427 x 640
    "astronaut",  # 512 x 512
    "immunohistochemistry",  # 512 x 512
    "motorcycle_left",  # 500 x 741
    "motorcycle_right",  # 500 x 741
    "hubble_deep_field",  # 872 x 1000
    "retina",  # 1411 x 1411
)


def load_photo(name: str) -> np.ndarray:
    """One bundled photograph as (H, W, 3) uint8; nothing is downloaded."""
    import skimage.data

    if name in ("motorcycle_left", "motorcycle_right"):
        left, right, _disparity = skimage.data.stereo_motorcycle()
        img = left if name == "motorcycle_left" else right
    else:
        img = getattr(skimage.data, name)()
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"skimage.data.{name} is {img.dtype} {img.shape}, not (H, W, 3) uint8")
    return img


def _portrait(a: np.ndarray) -> np.ndarray:
    h, w = a.shape[:2]
    ph = min(h, 4 * w // 3)
    pw = 3 * ph // 4
    x = (w - pw) // 5
    return a[:ph, x : x + pw]


# Deterministic variants that turn each photograph into several records of other
# sizes and aspect ratios, so that every branch of the resize policy is used:
# landscape and portrait (which side is the short one), downscaling by up to 5.5x
# (retina) and upscaling (`small`, short side 150 < 256).
VARIANTS = {
    "full": lambda a: a,
    "hflip": lambda a: a[:, ::-1],
    "top_left": lambda a: a[: 7 * a.shape[0] // 8, : 7 * a.shape[1] // 8],
    "bottom_right": lambda a: a[a.shape[0] // 8 :, a.shape[1] // 8 :],
    "center_half": lambda a: a[
        a.shape[0] // 4 : 3 * a.shape[0] // 4, a.shape[1] // 4 : 3 * a.shape[1] // 4
    ],
    "portrait": _portrait,
    "strip": lambda a: a[a.shape[0] - min(a.shape[0], a.shape[1] // 3) :],
    "small": lambda a: a[
        (a.shape[0] - 150) // 2 : (a.shape[0] - 150) // 2 + 150,
        (a.shape[1] - 200) // 2 : (a.shape[1] - 200) // 2 + 200,
    ],
    "rot90": lambda a: np.rot90(a),
}


def records(photos: int) -> list[tuple[str, str, np.ndarray]]:
    """(photo, variant, (H, W, 3) uint8) for the first `photos` photographs, each
    with every variant, photo by photo: the order of the stores' records."""
    out = []
    for name in PHOTOS[:photos]:
        img = load_photo(name)
        for variant, fn in VARIANTS.items():
            out.append((name, variant, np.ascontiguousarray(fn(img))))
    return out


# --------------------------------------------------------------------------- resize policy

SHORT = 256  # the short side after resizing
CROP = 224  # then the central CROP x CROP square

# Pillow's 8-bit resampler works in fixed point: coefficients are scaled by 2**22,
# each pass accumulates integer products, adds half and shifts back, clamping to
# 0..255. The horizontal pass runs first and its result is stored as 8-bit pixels
# before the vertical pass. Doing the same here in integer arithmetic gives the same
# bytes as Pillow in any array library, on any device: integer sums do not depend on
# the order in which a kernel adds them, unlike float sums.
BITS = 22
HALF = 1 << (BITS - 1)


def resized_size(h: int, w: int) -> tuple[int, int]:
    """(height, width) after scaling the short side to SHORT, the long side rounded.
    The same rule as benchmarks/loaderx_bench/prepare/vision.py."""
    s = SHORT / min(w, h)
    rw, rh = (SHORT, round(h * s)) if w <= h else (round(w * s), SHORT)
    return rh, rw


def _axis(n_in: int, n_out: int, first: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Bilinear (triangle, widened by the scale when downscaling, so antialiased)
    coefficients for outputs first..first+CROP-1 of resizing n_in samples to n_out.

    Each step repeats the floating-point operations of Pillow's coefficient
    computation in the same order, so the rounded integer coefficients are the
    ones Pillow uses. Returns the input index and the integer weight of each tap
    (CROP, taps), and the range [lo, hi) of inputs that any tap reads; the indices
    are relative to lo.
    """
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale  # the triangle's support is 1 at scale 1
    taps = int(math.ceil(support)) * 2 + 1
    ss = 1.0 / filterscale
    out = np.arange(first, first + CROP, dtype=np.int64)
    center = (out + 0.5) * scale
    # C casts truncate toward zero; np.trunc does the same.
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), n_in)
    count = xmax - xmin
    t = np.arange(taps, dtype=np.int64)
    arg = np.abs(((t[None, :] + xmin[:, None]) - center[:, None] + 0.5) * ss)
    w = np.where((arg < 1.0) & (t[None, :] < count[:, None]), 1.0 - arg, 0.0)
    # Sum tap by tap, left to right, like the C loop; np.sum's pairwise order could
    # change the last bit of the total, and with it a rounded coefficient.
    total = np.zeros(CROP)
    for k in range(taps):
        total = total + w[:, k]
    w = np.where(total[:, None] != 0.0, w / np.where(total != 0.0, total, 1.0)[:, None], w)
    weights = np.trunc(0.5 + w * float(1 << BITS)).astype(np.int32)
    # Taps past a sample's count have weight 0; point them at a valid input.
    index = xmin[:, None] + np.minimum(t[None, :], count[:, None] - 1)
    lo, hi = int(xmin.min()), int(xmax.max())
    return (index - lo).astype(np.int64), weights, lo, hi


@functools.cache
def resize_plan(h: int, w: int) -> tuple:
    """Everything the resize of an (h, w) image needs, computed once per shape on the
    host: column indices and weights (CROP, kx), row indices and weights (CROP, ky),
    and the rows [y0, y1) and columns [x0, x1) of the input that the crop reads."""
    rh, rw = resized_size(h, w)
    xi, xw, x0, x1 = _axis(w, rw, (rw - CROP) // 2)
    yi, yw, y0, y1 = _axis(h, rh, (rh - CROP) // 2)
    return xi, xw, yi, yw, y0, y1, x0, x1


def resize_crop(img, xi, xw, yi, yw, y0: int, y1: int, x0: int, x1: int, int32, uint8):
    """(3, h, w) uint8 -> (3, CROP, CROP) uint8: the short side scaled to SHORT, then
    the central crop, bit for bit what Pillow's
    ``Image.resize(size, Image.Resampling.BILINEAR, reducing_gap=None)`` followed by
    the crop gives.

    `img` and the tables may be NumPy arrays, torch tensors or JAX arrays (the
    tables as the same kind, on the same device); `int32` and `uint8` convert an
    array of that kind. Only the rows and columns the crop reads are touched.
    """
    # int32 is wide enough: an output's weights sum to about 2**22, times at most 255.
    x = int32(img[:, y0:y1, x0:x1])
    # Horizontal pass: (3, rows, CROP, kx) products, summed over the taps.
    h = (x[:, :, xi] * xw).sum(-1)
    h = ((h + HALF) >> BITS).clip(0, 255)
    # Vertical pass over the 8-bit intermediate: (3, CROP, ky, CROP) products.
    v = (h[:, yi, :] * yw[:, :, None]).sum(-2)
    return uint8(((v + HALF) >> BITS).clip(0, 255))


# --------------------------------------------------------------------------- the encoder

# A frozen convolutional encoder: three 4x4 convolutions of stride 2 and padding 1
# (224 -> 112 -> 56 -> 28), ReLU after the first two, on inputs normalized with the
# ImageNet channel statistics. The weights are drawn once with NumPy from a fixed
# seed, so torch and JAX run the very same numbers.
CHANNELS = (3, 16, 32, 8)
LATENT = (CHANNELS[-1], 28, 28)
SEED = 0
MEAN = (np.array([0.485, 0.456, 0.406], dtype=np.float32) * np.float32(255)).reshape(1, 3, 1, 1)
STD = (np.array([0.229, 0.224, 0.225], dtype=np.float32) * np.float32(255)).reshape(1, 3, 1, 1)


def encoder_weights(seed: int = SEED) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(weight (out, in, 4, 4), bias (out,))] per layer, float32, He-scaled."""
    rng = np.random.default_rng(seed)
    layers = []
    for cin, cout in zip(CHANNELS[:-1], CHANNELS[1:], strict=True):
        w = rng.normal(0.0, math.sqrt(2.0 / (cin * 16)), (cout, cin, 4, 4)).astype(np.float32)
        b = rng.normal(0.0, 0.01, cout).astype(np.float32)
        layers.append((w, b))
    return layers


# --------------------------------------------------------------------------- tolerances

# Dense vs Ragged, same framework: the Ragged path's resize gives the Dense store's
# bytes exactly (integer arithmetic, checked record by record), and the same
# encoder on the same batch gives the same floats. So the latents must be equal.
LAYOUT_ATOL = 0.0
# torch vs JAX: two convolution implementations add float32 products in different
# orders. The latents reach about 7 in magnitude (compare.py prints the maximum);
# the largest difference measured on the full data set was 6.7e-6 (README), and
# the bound leaves room for other CPUs and kernels.
FRAMEWORK_ATOL = 1e-4
# One record encoded alone vs the same record in a batch of B: the same framework
# may pick another kernel for batch size 1.
SINGLE_ATOL = 1e-5
