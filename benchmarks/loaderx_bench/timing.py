"""Timing calls: warm-up, latencies of repeated calls, their 95th percentile."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

WARM_BATCHES = 20  # at most; warm-up also stops after the timed span's length


def p95(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values), 95))


def time_calls(
    call: Callable[[np.ndarray], object], draw: Callable[[], np.ndarray], min_seconds: float
) -> list[float]:
    """Latencies (s) of ``call(draw())`` until they sum to ``min_seconds``.

    Drawing the argument and dropping the result happen outside the timed span."""
    latencies: list[float] = []
    total = 0.0
    while total < min_seconds:
        arg = draw()
        start = time.perf_counter()
        result = call(arg)
        elapsed = time.perf_counter() - start
        del result
        latencies.append(elapsed)
        total += elapsed
    return latencies


def warm_up(call: Callable[[np.ndarray], object], draw: Callable[[], np.ndarray], seconds: float):
    """Up to WARM_BATCHES calls, stopping early once `seconds` have passed."""
    until = time.perf_counter() + seconds
    for _ in range(WARM_BATCHES):
        call(draw())
        if time.perf_counter() > until:
            break
