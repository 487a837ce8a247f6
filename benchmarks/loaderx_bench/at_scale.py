"""At scale: stores of millions of tiny records behind nginx, at 0 and 50 ms.

For each record count (``--records``, default 1 million and 100 million), one raw
Dense store of int64 (2,) records (record i is ``[i, 3 i + 1]``, 16 bytes; its
index is 24 bytes a record) is written, served by nginx on 127.0.0.1
(``loaderx_bench.servers``; at 50 ms nginx waits that long before each answer),
and read in fresh processes:

* **open**: opening the URL alone: seconds, and the requests and body bytes nginx
  served for it;
* **first batch**: opening plus the first batch of 256 of a ``WindowedSampler``,
  checked against the records' values, with no cache: the time to first batch;
* **cold pass**: the Loader with its defaults over a ``WindowedSampler`` (batch
  256) from an empty cache: a whole pass for stores of at most ``--full-pass``
  records, else ``--steps`` steps (20,000 by default: a fresh process over a
  warm cache reads each block of its window from the cache's files into memory
  as it first meets it, a cost the 2,000 steps timed before did not amortize
  over a window of millions of records). Printed: the Loader's first step
  (from before the open, as the first batch; through the cache it fetches
  whole blocks), records/s from the Loader's start (after the open) and over
  the steps after its first (whose wait the first step's time shows), the
  bytes nginx served against the store's size (for a part of a pass, against
  the same share of the store), its requests per second, and the process's RSS
  and PSS at the end. A pass of at most 10,000 steps is timed
  three times, each from an empty cache, and the run of median rate kept (with
  its traffic and warm pass). Before each cold pass the disk is synced, and the
  caches are deleted only once a size is done: deleting one just before a pass
  stalled that pass's writes for seconds on a disk mounted with discard;
* **warm pass**: the same steps again from the cache the cold pass filled,
  against the same steps from the local store.

Every batch of every pass is checked against the records' values. The rate at 50
ms against 0 ms is printed per record count, from the Loader's start and over
the steps after its first. With ``--s3`` the store is also
uploaded to s3s-fs and read through an nginx in front of it that adds the same
wait; ``--s3-up-to`` leaves larger stores to nginx alone, since the upload is a
second copy of the store on the same disk.

Usage: python scripts/bench_at_scale.py [--records 1000000,100000000] [--latencies 0,50]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import one_bench_at_a_time
from loaderx_bench.memory import PSS_FIELDS
from loaderx_bench.report import finish_results, fmt_num, start_results, table
from loaderx_bench.servers import Nginx, S3sFs
from loaderx_bench.workers import emit, run_backend

BATCH = 256
CHUNK = 1 << 20
OPTIONS = {"allow_http": "true"}
CACHE_BYTES = 64 << 30
#: Passes of at most SHORT_PASS steps are timed COLD_RUNS times (the median kept).
COLD_RUNS = 3
SHORT_PASS = 10_000


def values(ids: np.ndarray) -> np.ndarray:
    ids = ids.astype(np.int64)
    return np.stack([ids, 3 * ids + 1], axis=1)


def write_store(path: Path, n: int) -> None:
    from loaderx.zrecord import Dense

    with Dense.create(path, np.int64, (2,), codec="raw") as w:
        for start in range(0, n, CHUNK):
            w.append(values(np.arange(start, min(start + CHUNK, n))))


def memory_kib() -> dict[str, int]:
    """This process's RSS and PSS (KiB), from /proc/self/smaps_rollup."""
    got = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss") or name in PSS_FIELDS:
            got[name] = int(rest.split()[0])
    return got


# -- workers -----------------------------------------------------------------------


def _open(source: str, cache: str | None, options: dict[str, str]):
    from loaderx.zrecord import Cache, Dense

    if "://" not in source:
        return Dense.open(source)
    return Dense.open(
        source,
        storage_options=options,
        cache=None if cache is None else Cache(cache, max_bytes=CACHE_BYTES),
    )


def worker(what: str, source: str, cache: str | None, steps: int, options: dict) -> None:
    from loaderx.dataloader import Loader
    from loaderx.sampler import WindowedSampler

    started = time.perf_counter()
    reader = _open(source, cache, options)
    opened = time.perf_counter() - started
    if what == "open":
        emit({"status": "ok", "open_s": opened, "fetched": reader.traffic().fetched})
        return
    if what == "first":
        ids = WindowedSampler(reader, BATCH, seed=1).next()
        got = np.from_dlpack(reader[ids])
        first = time.perf_counter() - started
        if not np.array_equal(got, values(ids)):
            raise AssertionError("the first batch differs from the records' values")
        emit({"status": "ok", "open_s": opened, "first_s": first})
        return
    check = WindowedSampler(reader, BATCH, seed=1)
    loader = Loader({"x": [reader]}, WindowedSampler(reader, BATCH, seed=1))
    with loader:
        it = iter(loader)
        t = time.perf_counter()
        for step in range(steps):
            got = np.from_dlpack(next(it)[0]["x"])
            if step == 0:
                after_first = time.perf_counter()
                first = after_first - started
            if not np.array_equal(got, values(check.next())):
                raise AssertionError("a batch differs from the records' values")
        ended = time.perf_counter()
        elapsed = ended - t
        mem = memory_kib()
    fetched, from_cache = reader.traffic()
    emit(
        {
            "status": "ok",
            "records_s": steps * BATCH / elapsed,
            "after_first_records_s": (steps - 1) * BATCH / max(ended - after_first, 1e-9),
            "first_step_s": first,
            "pass_s": elapsed,
            "fetched": fetched,
            "from_cache": from_cache,
            **{f"{k.lower()}_kib": v for k, v in mem.items()},
        }
    )


# -- driver ------------------------------------------------------------------------


def run(
    what: str, source: str, cache: Path | None = None, steps: int = 0, options: dict | None = None
) -> dict:
    argv = ["-m", __spec__.name, "--worker", what, source, str(cache or "-"), str(steps)]
    argv.append(json.dumps(options or OPTIONS))
    got = run_backend(sys.executable, argv, None, 3600.0)
    if got.get("status") != "ok":
        raise RuntimeError(f"{what} {source}: {got.get('status')}: {got.get('reason')}")
    return got


def measure(n: int, work: Path, latencies: list[float], args) -> list[dict]:
    root = work / f"served-{n}"
    store = root / "s"
    t = time.perf_counter()
    write_store(store, n)
    size = sum(p.stat().st_size for p in store.iterdir())
    full = n <= args.full_pass
    steps = -(-n // BATCH) if full else args.steps
    share = min(1.0, steps * BATCH / n)
    print(
        f"\n{n:,} records: {size / 2**20:.1f} MiB written in {time.perf_counter() - t:.0f} s; "
        f"passes of {steps} steps ({'a whole pass' if full else f'{share:.2%} of a pass'})",
        flush=True,
    )
    caches = root / "caches"
    caches.mkdir(exist_ok=True)
    os.sync()
    rows = [{"label": "local store", **run("pass", str(store), None, steps)}]
    s3 = None
    if args.s3 and n <= args.s3_up_to:
        (work / "s3" / "bench").mkdir(parents=True, exist_ok=True)
        s3 = S3sFs(work / "s3")
        s3.start()
    try:
        if s3 is not None:
            from loaderx.zrecord import upload

            upload(store, f"s3://bench/s{n}", storage_options=s3.storage_options())
        servers = [("nginx", None)] + ([("s3s-fs behind nginx", s3)] if s3 else [])
        for name, upstream in servers:
            for ms in latencies:
                up = upstream.url if upstream else None
                with Nginx(root, workers=2, delay_ms=ms, upstream=up) as server:
                    if upstream is None:
                        url, options = f"{server.url}/s", OPTIONS
                    else:
                        url = f"s3://bench/s{n}"
                        options = {**upstream.storage_options(), "aws_endpoint": server.url}
                    row = measure_one(f"{name} + {ms:g} ms", server, url, options, steps, caches)
                    row.update(size=size, share=share)
                rows.append(row)
                print(f"  {row['label']}: done", file=sys.stderr, flush=True)
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(work / "s3", ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    return rows


def measure_one(
    label: str, server: Nginx, url: str, options: dict, steps: int, caches: Path
) -> dict:
    """Open, first batch, and a cold then a warm pass of `url` through `server`."""
    server.reset_counts()
    row = {"label": label, **run("open", url, options=options)}
    row.update(open_requests=server.counts()["requests"])
    row.update(open_bytes=server.counts()["body_bytes"])
    row.update(first_s=run("first", url, options=options)["first_s"])
    # A short pass is timed several times, each from an empty cache, and the
    # median kept: its rate turns on the first steps' round trips and on what
    # else this machine runs at that moment.
    colds = []
    for _ in range(COLD_RUNS if steps <= SHORT_PASS else 1):
        cache = Path(tempfile.mkdtemp(prefix="loaderx-at-scale-cache-", dir=caches))
        # Each cold pass starts with nothing of the runs before it still being
        # written back or deleted: on a disk mounted with discard, deleting a
        # cache of hundreds of MiB stalls the writes that follow it for
        # seconds. The caches are deleted once all of a size's runs are done.
        os.sync()
        server.reset_counts()
        cold = run("pass", url, cache, steps, options)
        served = server.counts()
        warm = run("pass", url, cache, steps, options)
        colds.append((cold["records_s"], cold, served, warm))
    colds.sort(key=lambda c: c[0])
    _, row["cold"], row["served"], row["warm"] = colds[len(colds) // 2]
    row["cold_runs"] = [c[0] for c in colds]
    return row


def render(rows: list[dict]) -> str:
    local = rows[0]["records_s"]
    headers = ["source", "open s", "open requests", "open KiB", "first batch s"]
    headers += ["Loader first step s", "cold records/s", "after first step"]
    headers += ["fetched / read share", "requests/s"]
    headers += ["RSS MiB", "PSS MiB"]
    headers += ["warm records/s", "warm vs local"]
    lines = [["local store", *[""] * 11, f"{local:.0f}", "1.00x"]]
    for r in rows[1:]:
        cold, warm, served = r["cold"], r["warm"], r["served"]
        lines.append(
            [
                r["label"],
                f"{r['open_s']:.3f}",
                str(r["open_requests"]),
                fmt_num(r["open_bytes"] / 1024),
                f"{r['first_s']:.3f}",
                f"{cold['first_step_s']:.3f}",
                f"{cold['records_s']:.0f}",
                f"{cold['after_first_records_s']:.0f}",
                f"{served['body_bytes'] / (r['size'] * r['share']):.2f}",
                f"{served['requests'] / cold['pass_s']:.0f}",
                fmt_num(cold["rss_kib"] / 1024),
                fmt_num(cold["pss_kib"] / 1024),
                f"{warm['records_s']:.0f}",
                f"{warm['records_s'] / local:.2f}x",
            ]
        )
    return table(headers, lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default="1000000,100000000", help="record counts")
    ap.add_argument("--latencies", default="0,50", help="ms nginx waits before each answer")
    ap.add_argument("--full-pass", type=int, default=10_000_000, help="whole passes up to this")
    ap.add_argument("--steps", type=int, default=20_000, help="steps of a pass of larger stores")
    ap.add_argument("--dir", help="where the stores go (default: a new temporary folder)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--s3", action="store_true", help="also s3s-fs, behind nginx")
    ap.add_argument(
        "--s3-up-to",
        type=int,
        default=1 << 62,
        help="stores of more records go to nginx only (an upload copies the store)",
    )
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        what, source, cache, steps, options = args.worker
        worker(what, source, None if cache == "-" else cache, int(steps), json.loads(options))
        return 0
    counts = [int(x) for x in args.records.split(",")]
    latencies = [float(x) for x in args.latencies.split(",")]
    results = start_results("bench_at_scale", latencies_ms=latencies, records=counts)
    started = time.perf_counter()
    print("Dense int64 (2,) raw records; Loader defaults; WindowedSampler, batch 256, seed 1")
    with one_bench_at_a_time():
        work = Path(tempfile.mkdtemp(prefix="loaderx-at-scale-", dir=args.dir))
        try:
            for n in counts:
                rows = measure(n, work, latencies, args)
                results["workloads"][str(n)] = rows
                print(f"\n{n:,} records:\n{render(rows)}")
                by = {r["label"]: r for r in rows}
                for name in ("nginx", "s3s-fs behind nginx"):
                    slow, fast = by.get(f"{name} + 50 ms"), by.get(f"{name} + 0 ms")
                    if slow and fast:
                        ratio = slow["cold"]["records_s"] / fast["cold"]["records_s"]
                        steady = (
                            slow["cold"]["after_first_records_s"]
                            / fast["cold"]["after_first_records_s"]
                        )
                        print(
                            f"{name}, cold pass: 50 ms at {ratio:.0%} of the 0 ms rate"
                            f" (its steps after the first: {steady:.0%})"
                        )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finish_results(results, started, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
