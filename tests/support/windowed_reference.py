"""A pure-Python model of the WindowedSampler's batch function, written from
``docs/sampler.md``, section "WINDOWED" (plain integers, no NumPy in the
arithmetic). It reuses the CYCLIC network of ``sampler_reference.py``; the tests
check that the native sampler reproduces it bit for bit."""

from __future__ import annotations

from sampler_reference import GAMMA, M32, M64, ROUNDS, feistel, half_bits, mix32, mix64

TAG_WINDOW_ORDER = 0x6C782E776E640004
TAG_WINDOW_RECORDS = 0x6C782E776E720005


def stream_key(seed: int, tag: int, index: int) -> int:
    return mix64((mix64(seed ^ tag) + ((index + 1) & M64) * GAMMA) & M64)


def keys_of(key: int) -> list[int]:
    return [mix64(key + (r + 1) * GAMMA) & M32 for r in range(ROUNDS)]


def permute(length: int, key: int, position: int) -> int:
    h, k = half_bits(length), keys_of(key)
    x = feistel(position, h, k)
    while x >= length:
        x = feistel(x, h, k)
    return x


def feistel_inverse(x: int, h: int, keys: list[int]) -> int:
    mask = (1 << h) - 1
    left, right = x >> h, x & mask
    for k in reversed(keys):
        left, right = right ^ (mix32(left ^ k) & mask), left
    return (left << h) | right


def unpermute(length: int, key: int, value: int) -> int:
    h, k = half_bits(length), keys_of(key)
    x = feistel_inverse(value, h, k)
    while x >= length:
        x = feistel_inverse(x, h, k)
    return x


def geometry(
    length: int, data_bytes: int, block_bytes: int, window_bytes: int, index_bytes: int = 0
):
    """(group, window, windows, last): positions per group and per window, windows
    per pass, positions of the last window. Groups are sized from the data and
    the index bytes together."""
    total = data_bytes + index_bytes
    group = length if total == 0 else min(length, max(1, block_bytes * length // total))
    window = min(length, max(1, window_bytes // block_bytes) * group)
    windows = -(-length // window)
    return group, window, windows, length - (windows - 1) * window


def position(length, data_bytes, block_bytes, window_bytes, seed, n, index_bytes=0) -> int:
    """The record of draw number ``n`` (any integer >= 0)."""
    _, window, windows, last = geometry(length, data_bytes, block_bytes, window_bytes, index_bytes)
    p, k = divmod(n, length)
    p &= M64
    order_key = stream_key(seed, TAG_WINDOW_ORDER, p)
    q = unpermute(windows, order_key, windows - 1)
    if k < q * window:
        w, offset, size = permute(windows, order_key, k // window), k % window, window
    elif k < q * window + last:
        w, offset, size = windows - 1, k - q * window, last
    else:
        t, offset = divmod(k - last, window)
        w, size = permute(windows, order_key, t + 1), window
    key = stream_key(stream_key(seed, TAG_WINDOW_RECORDS, p), 0, w)
    return w * window + permute(size, key, offset)


def batch(
    length, data_bytes, block_bytes, window_bytes, batch_size, seed, step, index_bytes=0
) -> list[int]:
    """The batch of ``step`` as a list of Python ints."""
    return [
        position(
            length, data_bytes, block_bytes, window_bytes, seed, step * batch_size + i, index_bytes
        )
        for i in range(batch_size)
    ]
