"""Gathers of tiny records from a cache's memory against the local store.

For each record count (``--records``, default 1 million and 10 million), a raw
Dense store of int64 (2,) records (record i is ``[i, 3 i + 1]``, 16 bytes, 24
of index) is written and uploaded to a ``file://`` location, and a reader of
that location with a cache reads the batches below twice: the first time
fetches their blocks into the cache, the second reads them back into memory.
The batches are the first ``--batches`` of a ``WindowedSampler`` (batch 256,
seed 1). Three readers then gather every batch (``reader[idx]``, one call per
batch), ``--rounds`` times in interleaved rounds: the local store as opened
by default, the local store with ``checked=True`` (every record hashed, as a
remote store's always are), and the remote reader, every one of whose index
and data blocks is in memory by then (its traffic is checked to show no
fetch). Every batch of every reader is checked against the records' values
first. Printed per reader: microseconds per gather (fastest and median
round) and the local store's median over the reader's median.

No server and no Loader: this times the gather alone, the part of a warm pass
that differs between a local and a remote store (``bench_at_scale`` times
whole passes through the Loader behind real servers).

Usage: python scripts/bench_warm_gather.py [--records 1000000,10000000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.at_scale import values, write_store
from loaderx_bench.machine import one_bench_at_a_time
from loaderx_bench.report import finish_results, start_results, table

BATCH = 256


def host(records) -> np.ndarray:
    return np.from_dlpack(records)


def measure(n: int, work: Path, batches: int, rounds: int) -> list[list[str]]:
    from loaderx.sampler import WindowedSampler
    from loaderx.zrecord import Cache, Dense, upload

    local_path, remote = work / f"s{n}", work / f"up{n}"
    write_store(local_path, n)
    upload(local_path, remote.as_uri())
    readers = {
        "local store": Dense.open(local_path),
        "local store, checked=True": Dense.open(local_path, checked=True),
        "remote, cache in memory": Dense.open(
            remote.as_uri(), cache=Cache(work / f"cache{n}", max_bytes=64 << 30)
        ),
    }
    sampler = WindowedSampler(readers["local store"], BATCH, seed=1)
    idx = [np.asarray(sampler.next()).copy() for _ in range(batches)]
    for name, r in readers.items():
        for b in idx:
            if not np.array_equal(host(r[b]), values(b)):
                raise AssertionError(f"{name}: a batch differs from the records' values")
    remote_reader = readers["remote, cache in memory"]
    for b in idx:  # every block now read back from the cache into memory
        remote_reader[b]
    fetched = remote_reader.traffic().fetched
    times: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, r in readers.items():
            t = time.perf_counter()
            for b in idx:
                r[b]
            times[name].append((time.perf_counter() - t) / len(idx) * 1e6)
    if remote_reader.traffic().fetched != fetched:
        raise AssertionError("the remote reader fetched while it was timed")
    local = statistics.median(times["local store"])
    rows = []
    for name, t in times.items():
        med = statistics.median(t)
        rows.append([name, f"{min(t):.2f}", f"{med:.2f}", f"{local / med:.2f}x"])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default="1000000,10000000", help="record counts")
    ap.add_argument("--batches", type=int, default=2000, help="batches of 256 per round")
    ap.add_argument("--rounds", type=int, default=9, help="rounds per reader")
    ap.add_argument("--dir", help="where the stores go (default: a new temporary folder)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.records.split(",")]
    results = start_results("bench_warm_gather", records=counts, batches=args.batches)
    started = time.perf_counter()
    print(f"Dense int64 (2,) raw records; WindowedSampler, batch {BATCH}, seed 1")
    headers = ["reader", "fastest round us", "median round us", "local / reader"]
    with one_bench_at_a_time():
        work = Path(tempfile.mkdtemp(prefix="loaderx-warm-gather-", dir=args.dir))
        try:
            for n in counts:
                rows = measure(n, work, args.batches, args.rounds)
                results["workloads"][str(n)] = rows
                print(f"\n{n:,} records, {args.batches} batches of {BATCH}:")
                print(table(headers, rows))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finish_results(results, started, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
