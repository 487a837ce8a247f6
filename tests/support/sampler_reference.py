"""A pure-Python model of the Sampler's three batch functions, written from
``docs/sampler.md`` alone (plain integers, no NumPy in the arithmetic). The tests
check that the native Sampler reproduces it bit for bit, and the sampler benchmark
(benchmarks/loaderx_bench/sampler.py) loads this file to check what it times."""

from __future__ import annotations

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1

GAMMA = 0x9E3779B97F4A7C15
TAG_IID = 0x6C782E6969640001
TAG_CYCLIC = 0x6C782E6379630002
ROUNDS = 6

SEQUENTIAL, IID, CYCLIC = "SEQUENTIAL", "IID", "CYCLIC"


def mix64(z: int) -> int:
    """SplitMix64 finalizer on a 64-bit integer."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix32(x: int) -> int:
    """The Feistel round mixer on a 32-bit integer."""
    x &= M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def reduce(u: int, n: int) -> int:
    """floor(u * n / 2**64)."""
    return (u * n) >> 64


def half_bits(length: int) -> int:
    """The smallest h >= 1 with 2**(2h) >= length."""
    h = 1
    while (1 << (2 * h)) < length:
        h += 1
    return h


def round_keys(seed: int, cycle: int) -> list[int]:
    cycle_key = mix64(mix64(seed ^ TAG_CYCLIC) + (cycle + 1) * GAMMA)
    return [mix64(cycle_key + (r + 1) * GAMMA) & M32 for r in range(ROUNDS)]


def feistel(x: int, h: int, keys: list[int]) -> int:
    mask = (1 << h) - 1
    left, right = x >> h, x & mask
    for k in keys:
        left, right = right, left ^ (mix32(right ^ k) & mask)
    return (left << h) | right


def permute(length: int, seed: int, cycle: int, position: int) -> int:
    """The image of ``position`` under cycle ``cycle``'s bijection of [0, length)."""
    assert 0 <= position < length
    h = half_bits(length)
    keys = round_keys(seed, cycle)
    x = feistel(position, h, keys)
    while x >= length:  # cycle walking
        x = feistel(x, h, keys)
    return x


def batch(mode: str, length: int, batch_size: int, seed: int, step: int) -> list[int]:
    """The batch of ``step`` as a list of Python ints."""
    if mode == SEQUENTIAL:
        return [(step * batch_size + i) % length for i in range(batch_size)]
    if mode == IID:
        state0 = mix64(seed ^ TAG_IID)
        out = []
        for i in range(batch_size):
            n = (step * batch_size + i) & M64  # draw number, mod 2**64
            out.append(reduce(mix64(state0 + (n + 1) * GAMMA), length))
        return out
    if mode == CYCLIC:
        per_cycle = length // batch_size
        assert per_cycle >= 1
        cycle, within = divmod(step, per_cycle)
        h = half_bits(length)
        keys = round_keys(seed, cycle)
        out = []
        for i in range(batch_size):
            x = feistel(within * batch_size + i, h, keys)
            while x >= length:
                x = feistel(x, h, keys)
            out.append(x)
        return out
    raise ValueError(mode)
