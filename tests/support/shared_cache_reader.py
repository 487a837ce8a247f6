"""One process of tests/remote/test_shared_cache.py: a reader of a remote store
sharing its block cache with other processes.

    python shared_cache_reader.py URL CACHE BLOCK_BYTES GO [WIDTH]

It opens the store at URL (records of WIDTH bytes, ``SHAPE[0]`` by default) with
the cache directory CACHE (blocks of BLOCK_BYTES), prints "ready", waits for the
file GO to exist (so that every process starts its reads at once),
reads every record in batches of BATCH in order, checks each against the values
``expected`` gives, and prints one JSON line: what its reader fetched and read
from the cache. Any difference exits non-zero.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

RECORDS = 3000
SHAPE = (1000,)
BATCH = 250


def expected(ids: np.ndarray, width: int = SHAPE[0]) -> np.ndarray:
    """Record i of the store: `width` bytes that differ from other records'."""
    base = (ids.astype(np.uint64) * np.uint64(2654435761))[:, None]
    return ((base + np.arange(width, dtype=np.uint64)) % np.uint64(251)).astype(np.uint8)


def main(url: str, cache_dir: str, block_bytes: int, go: str, width: int = SHAPE[0]) -> None:
    from loaderx.zrecord import Cache, Dense

    cache = Cache(cache_dir, block_bytes=block_bytes)
    with Dense.open(url, storage_options={"allow_http": "true"}, cache=cache) as ds:
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while not Path(go).exists():
            if time.monotonic() > deadline:
                raise SystemExit("no start signal within 60 s")
            time.sleep(0.001)
        for start in range(0, len(ds), BATCH):
            ids = np.arange(start, min(start + BATCH, len(ds)))
            got = np.from_dlpack(ds[ids])
            if not np.array_equal(got, expected(ids, width)):
                raise SystemExit(f"records {start}.. differ")
        fetched, from_cache = ds.traffic()
    print(json.dumps({"fetched": fetched, "from_cache": from_cache}))


if __name__ == "__main__":
    width = int(sys.argv[5]) if len(sys.argv) > 5 else SHAPE[0]
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], width)
