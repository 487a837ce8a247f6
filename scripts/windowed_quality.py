"""Shuffle quality and locality of WINDOWED against IID and CYCLIC.

For two store geometries (sizes only: no store is written) it draws one pass of
batches of 256 from each mode with seed 0 and prints, per mode:

- ``lag1``: the correlation between positions in consecutive slots of a batch,
  pooled over all batches (0 for independent draws);
- ``lag1 win``: the same for the offsets of positions within their WINDOWED
  window, each divided by its window's size (the last window is shorter), over
  the consecutive pairs that lie in one window: how random the order inside a
  window is;
- ``|r| slot``: the mean over batches of the absolute correlation between a
  slot's index in its batch and its position (about ``0.8 / sqrt(256)`` = 0.05
  for independent draws);
- ``spread``: the mean over batches of the standard deviation of the batch's
  positions, divided by the record count (0.289 for uniform draws);
- ``windows``: distinct WINDOWED windows a batch touches, on average;
- ``blocks``: distinct blocks (groups of about 1 MiB of records) a batch touches;
- ``fetched``: blocks fetched in the pass through an LRU cache of blocks holding
  ``CACHE_WINDOWS`` windows, divided by the store's blocks (1.0 = each block
  fetched once).

Every figure is a pure function of the samplers' definitions, so it does not
depend on the machine. Run: ``python scripts/windowed_quality.py``.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import numpy as np

from loaderx import _native
from loaderx.sampler import Sampler, WindowedSampler

BATCH = 256
CACHE_WINDOWS = 2
MiB = 2**20
# (name, records, bytes per record, window_bytes)
GEOMETRIES = [
    ("1M records of 1 KiB (1 GiB), 64 MiB windows", 1_000_000, 1024, 64 * MiB),
    ("4M records of 2 KiB (8 GiB), 256 MiB windows", 4_000_000, 2048, 256 * MiB),
]


def one_pass(sampler, steps: int) -> np.ndarray:
    return np.stack([sampler.next().astype(np.int64) for _ in range(steps)])


def lru_fetches(blocks: np.ndarray, capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    fetched = 0
    for b in blocks.tolist():
        if b in cache:
            cache.move_to_end(b)
            continue
        fetched += 1
        cache[b] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return fetched


def measure(batches: np.ndarray, n: int, group: int, window: int, capacity: int) -> list[float]:
    a, b = batches[:, :-1].ravel(), batches[:, 1:].ravel()
    lag1 = float(np.corrcoef(a, b)[0, 1])
    same = a // window == b // window
    last = n - (n - 1) // window * window
    size = np.where(a // window == (n - 1) // window, last, window)[same]
    lag1_win = float(np.corrcoef(a[same] % window / size, b[same] % window / size)[0, 1])
    slots = np.arange(batches.shape[1])
    rs = [abs(float(np.corrcoef(slots, row)[0, 1])) for row in batches]
    spread = float(np.mean(batches.std(axis=1)) / n)
    windows = float(np.mean([len(np.unique(row // window)) for row in batches]))
    blocks = batches // group
    distinct_blocks = float(np.mean([len(np.unique(row)) for row in blocks]))
    total_blocks = -(-n // group)
    fetched = lru_fetches(blocks.ravel(), capacity) / total_blocks
    return [lag1, lag1_win, float(np.mean(rs)), spread, windows, distinct_blocks, fetched]


def main() -> int:
    block = _native.DEFAULT_CACHE_BLOCK_BYTES
    for name, n, record_bytes, window_bytes in GEOMETRIES:
        steps = n // BATCH
        windowed = WindowedSampler.from_sizes(
            n, n * record_bytes, BATCH, seed=0, window_bytes=window_bytes, block_bytes=block
        )
        group = max(1, block * n // (n * record_bytes))
        window = windowed.window_records
        capacity = CACHE_WINDOWS * (window // group)
        print(
            f"{name}: {windowed.windows} windows of {window} records, "
            f"groups of {group}, cache of {capacity} blocks, {steps} batches of {BATCH}"
        )
        print(
            f"  {'mode':<9}{'lag1':>9}{'lag1 win':>10}{'|r| slot':>10}{'spread':>9}{'windows':>9}"
            f"{'blocks':>9}{'fetched':>9}"
        )
        modes = [
            ("IID", Sampler(n, BATCH, Sampler.Mode.IID, seed=0)),
            ("CYCLIC", Sampler(n, BATCH, Sampler.Mode.CYCLIC, seed=0)),
            ("WINDOWED", windowed),
        ]
        for mode, sampler in modes:
            row = measure(one_pass(sampler, steps), n, group, window, capacity)
            lag1, lag1_win, r, spread, windows, blocks, fetched = row
            print(
                f"  {mode:<9}{lag1:>9.4f}{lag1_win:>10.4f}{r:>10.4f}{spread:>9.4f}{windows:>9.2f}"
                f"{blocks:>9.1f}{fetched:>9.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
