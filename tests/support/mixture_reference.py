"""A pure-Python model of MixtureSampler, written from ``docs/loader.md``
("Mixtures") with plain integers and fractions. Where the native code uses a
closed form (the floor sum behind the visit counts), this model counts slot by
slot, so it checks the closed form as well as the definition. Meant for small
total weights."""

from __future__ import annotations

from fractions import Fraction
from math import gcd

import sampler_reference as ref

TAG_MIXTURE = 0x6C782E6D69780003
STRIDE_SPAN = 256
FLOAT_WEIGHT_BITS = 46


def integer_weights(weights: list[int | float]) -> list[int]:
    if all(isinstance(w, int) for w in weights):
        ints = list(weights)
    else:
        values = [Fraction(float(w)) for w in weights]
        top = max(values)
        e = top.numerator.bit_length() - top.denominator.bit_length()  # floor(log2), or one above
        if Fraction(2) ** e > top:
            e -= 1
        scale = Fraction(2) ** (FLOAT_WEIGHT_BITS - e)
        ints = [round(v * scale) for v in values]  # Fraction rounds half to even
    divisor = 0
    for w in ints:
        divisor = gcd(divisor, w)
    return [w // divisor for w in ints]


def largest_partial_quotient(a: int, b: int) -> int:
    largest = 0
    while a:
        largest = max(largest, b // a)
        a, b = b % a, a
    return largest


def stride(w: int) -> int:
    if w <= 1:
        return 0
    g0 = (w * ref.GAMMA) >> 64
    candidates = [
        c
        for c in range(max(1, g0 - STRIDE_SPAN), min(w - 1, g0 + STRIDE_SPAN) + 1)
        if gcd(c, w) == 1
    ]
    return min(candidates, key=lambda c: (largest_partial_quotient(c, w), abs(c - g0), c))


class Mixture:
    def __init__(self, ranges, weights, batch_size, modes, seed):
        self.ranges = list(ranges)
        self.weights = integer_weights(list(weights))
        self.total = sum(self.weights)
        self.bounds = [sum(self.weights[:r]) for r in range(len(self.weights) + 1)]
        self.stride = stride(self.total)
        self.batch_size = batch_size
        self.modes = list(modes)
        base = ref.mix64(seed ^ TAG_MIXTURE)
        self.keys = [ref.mix64(base + (r + 1) * ref.GAMMA) for r in range(len(self.ranges))]

    def range_of_slot(self, n: int) -> int:
        x = (n % self.total) * self.stride % self.total
        return next(r for r in range(len(self.ranges)) if self.bounds[r] <= x < self.bounds[r + 1])

    def visits_before(self, n: int) -> list[int]:
        """Per range, how many of slots ``0 .. n-1`` it owns: whole periods hold
        exactly its weight, the rest is counted one slot at a time."""
        counts = [(n // self.total) * w for w in self.weights]
        for i in range(n % self.total):
            counts[self.range_of_slot(i)] += 1
        return counts

    def position(self, r: int, k: int) -> int:
        start, stop = self.ranges[r]
        length = stop - start
        mode, key = self.modes[r], self.keys[r]
        if mode == ref.SEQUENTIAL:
            return start + k % length
        if mode == ref.IID:
            state0 = ref.mix64(key ^ ref.TAG_IID)
            u = ref.mix64(state0 + ((k & ref.M64) + 1) * ref.GAMMA)
            return start + ref.reduce(u, length)
        if mode == ref.CYCLIC:
            return start + ref.permute(length, key, (k // length) & ref.M64, k % length)
        raise ValueError(mode)

    def batch(self, step: int) -> list[int]:
        first = step * self.batch_size
        counts = self.visits_before(first)
        out = []
        for n in range(first, first + self.batch_size):
            r = self.range_of_slot(n)
            out.append(self.position(r, counts[r]))
            counts[r] += 1
        return out
