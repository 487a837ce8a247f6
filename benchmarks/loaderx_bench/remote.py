"""Remote stores: random gathers through the Loader from a store served over HTTP on
127.0.0.1 with added latency, against the same store read from local disk.

Two workloads, raw stores built from the same sources as ``scripts/bench.py``
(real data under ``data/`` when prepared, otherwise synthetic data of the same
geometry; the output says which):

* images: Dense uint8 (3, 224, 224) records, batch 64;
* tokens: Ragged int32 token sequences, batch 256.

The stores are served by nginx (``loaderx_bench.servers``), which answers byte
ranges from the files with sendfile and so is not the ceiling; for each latency a
fresh nginx waits that long before answering each request (its echo module's
timer). So every request costs one added round trip, as against an object store
some distance away; the loopback interface itself is never changed. With
``--s3``, the stores are also uploaded to s3s-fs (an S3 server in Rust) and read
through an nginx in front of it that adds the same wait.

Each measurement runs in a fresh process: it opens the store (local path, or URL),
draws IID batches from a seeded Sampler, and reads them through a Loader
(``--workers``, ``--prefetch``). Its first batch is compared with the same
positions read from the local store before anything is timed; then a warm-up, then
``--steps`` timed batches. Remote rows come in three cache states:

* no cache: every gather fetches its records;
* cold: an empty cache directory, filled as the run goes;
* warm: the directory the cold run filled, read again with the same seed, so the
  same batches: every record should come from the cache.

Tokens time ten times as many batches (2000) in the local store's row and the
warm rows as in the others: 200 batches of tokens from memory take some 25 ms,
too short a time to compare two rates by. Their cold run fetched every block of
the store, so the warm rows' later batches come from the cache too (their
"fetched MiB" shows it).

Before the loaders, the remote reader is checked directly: random batches read
through the server (no cache, a cold cache, then that cache warm) must equal the
local store's records.

The tables give records/s, the ratio to the local store, and what nginx
counted: requests and response-body bytes per record read (fetch amplification:
a record costs its own bytes, or a whole cache block).

Usage: python scripts/bench_remote.py [--quick] [--latencies 0,1,10,50] [--json PATH]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loaderx_bench.loader import build_stores, dense_source, ragged_source
from loaderx_bench.machine import one_bench_at_a_time
from loaderx_bench.report import finish_results, fmt_num, start_results, table, write_results
from loaderx_bench.servers import Nginx, S3sFs
from loaderx_bench.workers import emit, run_backend

BATCH = {"dense": 64, "ragged": 256}
# object_store's HTTP store refuses plain http:// unless allowed.
HTTP_OPTIONS = {"allow_http": "true"}
# Larger than any store this builds, so the warm run finds every block the cold one fetched.
CACHE_BYTES = 8 << 30
BUCKET = "bench"


def remote_support() -> str | None:
    """Why this loaderx cannot open a URL, or None when it can."""
    from loaderx import zrecord

    params = inspect.signature(zrecord.Dense.open).parameters
    missing = [p for p in ("storage_options", "cache") if p not in params]
    if missing:
        return (
            "remote reading is unavailable in this loaderx build: Dense.open takes no "
            + " or ".join(missing)
        )
    if not hasattr(zrecord, "Cache"):
        return "remote reading is unavailable in this loaderx build: no loaderx.zrecord.Cache"
    return None


def open_store(kind: str, where: str, cache: str | None, options: dict[str, str] | None = None):
    """The reader of ``where``: a local path, or a URL read through object_store with
    storage ``options`` and the cache directory ``cache`` (None: no cache)."""
    from loaderx.zrecord import Dense, Ragged

    cls = Dense if kind == "dense" else Ragged
    if "://" not in where:
        return cls.open(where)
    return cls.open(where, storage_options=options, cache=cache_arg(cache))


def cache_arg(cache: str | None):
    """What ``open(..., cache=)`` takes for a directory holding at most CACHE_BYTES."""
    if cache is None:
        return None
    from loaderx.zrecord import Cache

    return Cache(cache, max_bytes=CACHE_BYTES)


def as_arrays(kind: str, batch) -> tuple[np.ndarray, ...]:
    if kind == "dense":
        return (np.from_dlpack(batch),)
    return np.from_dlpack(batch.values), np.from_dlpack(batch.cu_seqlens)


def same(kind: str, got, want) -> bool:
    return all(
        np.array_equal(a, b)
        for a, b in zip(as_arrays(kind, got), as_arrays(kind, want), strict=True)
    )


# -- servers' CPU time ------------------------------------------------------------


def _tree_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:  # it exited meanwhile
        return 0.0
    children: list[int] = []
    for task in tasks:
        # A threaded server's threads come and go: one that ended since the
        # listing has no children file, and no children.
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(_tree_cpu(c) for c in children)


# -- the direct check --------------------------------------------------------------


def verify(
    kind: str, url: str, local_path: str, cache_dir: Path, batches: int, options: dict[str, str]
) -> str:
    """Random batches read through ``url`` (no cache, then a cold cache, then the
    same cache warm) equal the local store's records; returns a one-line summary."""
    local = open_store(kind, local_path, None)
    rng = np.random.default_rng(11)
    draws = [rng.integers(0, len(local), BATCH[kind]) for _ in range(batches)]
    for state, cache in (("no cache", None), ("cold", str(cache_dir)), ("warm", str(cache_dir))):
        remote = open_store(kind, url, cache, options)
        if len(remote) != len(local):
            raise AssertionError(f"{kind} {state}: {len(remote)} records, local {len(local)}")
        for ids in draws:
            if not same(kind, remote[ids], local[ids]):
                raise AssertionError(f"{kind} {state}: a batch differs from the local store")
    return f"{kind}: {batches} batches of {BATCH[kind]} equal the local store's (3 cache states)"


# -- workers -----------------------------------------------------------------------


def worker_main(args: argparse.Namespace) -> None:
    from loaderx.dataloader import Loader
    from loaderx.sampler import Sampler

    kind = args.kind
    batch = BATCH[kind]
    options = json.loads(args.options) if args.options else None
    t = run_start = time.perf_counter()
    cpu_start = time.process_time()
    reader = open_store(kind, args.source, args.cache, options)
    open_s = time.perf_counter() - t
    local = open_store(kind, args.local, None)
    sampler = Sampler(len(reader), batch, Sampler.Mode.IID, seed=args.seed)
    drawn: list[np.ndarray] = []

    class Recording:  # remembers the first draw so the first batch can be checked
        def next(self):
            idx = sampler.next()
            if not drawn:
                drawn.append(idx.copy())
            return idx

    def transform(shards):
        return shards[0]["x"]

    loader = Loader(
        {"x": [reader]},
        Recording(),
        transform=transform,
        workers=args.workers,
        prefetch=args.prefetch,
    )
    with loader:
        it = iter(loader)
        first = next(it)
        if not same(kind, first, local[drawn[0]]):
            raise AssertionError(f"{kind} from {args.source}: first batch differs from local")
        consumed = payload(kind, first)
        del first
        for _ in range(args.warmup):
            consumed += payload(kind, next(it))
        start = time.perf_counter()
        for _ in range(args.steps):
            consumed += payload(kind, next(it))  # a view's size: no copy, no read
        elapsed = time.perf_counter() - start
    emit(
        {
            "records_s": args.steps * batch / elapsed,
            "open_s": open_s,
            "consumed": consumed,
            "run_s": time.perf_counter() - run_start,
            "cpu_s": time.process_time() - cpu_start,
        }
    )


def payload(kind: str, batch) -> int:
    """Bytes of record values in a batch."""
    return int(as_arrays(kind, batch)[0].nbytes)


# -- driver ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small data, few steps")
    ap.add_argument("--latencies", default="0,1,10,50", help="added ms per request")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a storage option for every remote read, e.g. max_concurrency=64 (repeatable)",
    )
    ap.add_argument(
        "--s3",
        action="store_true",
        help="also read the stores uploaded to s3s-fs, behind nginx with the same latencies",
    )
    for hidden in ("--kind", "--source", "--local", "--cache", "--options"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return 0
    why = remote_support()
    if why is not None:
        print(why, file=sys.stderr)
        return 3
    latencies = [float(x) for x in args.latencies.split(",")]
    extra = dict(kv.split("=", 1) for kv in args.option)
    results = start_results(
        "bench_remote",
        quick=args.quick,
        workers=args.workers,
        prefetch=args.prefetch,
        latencies_ms=latencies,
        storage_options=extra,
    )
    started = time.perf_counter()
    steps = {"dense": 8, "ragged": 40} if args.quick else {"dense": 40, "ragged": 200}
    # Batches the local store's row and the warm rows time, per batch the others do.
    in_memory = {"dense": 1, "ragged": 10}
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(prefix="loaderx-remote-") as tmp:
        work = Path(tmp)
        (work / "src").mkdir()
        (work / "stores").mkdir()
        dense, dense_note = dense_source(args.quick, work / "src")
        tokens, offsets, tok_note = ragged_source(args.quick, work / "src")
        build_stores(dense, tokens, offsets, work / "stores")
        notes = {"dense": f"uint8 (3, 224, 224) images, {dense_note}", "ragged": tok_note}
        print(f"dense: {notes['dense']}; ragged: {notes['ragged']}")
        print(f"Loader workers={args.workers}, prefetch={args.prefetch}; storage options {extra}")
        s3 = None
        if args.s3:
            (work / "s3" / BUCKET).mkdir(parents=True)
            s3 = S3sFs(work / "s3")
            s3.start()
            for kind in ("dense", "ragged"):
                upload(str(work / "stores" / kind), f"s3://{BUCKET}/{kind}", s3.storage_options())
        with Nginx(work / "stores") as server:
            print("\nthe remote reader against the local store:")
            for kind in ("dense", "ragged"):
                cache = work / f"verify-cache-{kind}"
                local = str(work / "stores" / kind)
                url = f"{server.url}/{kind}"
                print(" ", verify(kind, url, local, cache, 3, {**HTTP_OPTIONS, **extra}))
        try:
            for kind in ("dense", "ragged"):
                timed = (steps[kind], steps[kind] * in_memory[kind])
                rows = measure(kind, work, s3, latencies, timed, args, extra)
                title = f"{kind}: {steps[kind]} timed batches of {BATCH[kind]}"
                if timed[1] != timed[0]:
                    title += f" ({timed[1]} for the local store and warm)"
                title += f"; {notes[kind]}"
                results["workloads"][kind] = {"info": {"title": title}, "rows": rows}
                print(f"\n{title}")
                print(render(rows), flush=True)
                if args.json:
                    write_results(args.json, results)
        finally:
            if s3 is not None:
                s3.stop()
        dense_rows = {r["label"]: r for r in results["workloads"]["dense"]["rows"]}
        if 0.0 in latencies and 50.0 in latencies:
            for state in ("no cache", "cold", "warm"):
                a = dense_rows.get(f"http + 50 ms, {state}")
                b = dense_rows.get(f"http + 0 ms, {state}")
                if a and b and a["status"] == b["status"] == "ok":
                    ratio = a["records_s"] / b["records_s"]
                    results[f"dense_50_vs_0_{state}"] = ratio
                    print(f"images, {state}: 50 ms latency at {ratio:.0%} of 0 ms throughput")
    finish_results(results, started, args.json)
    return 0


def upload(local: str, url: str, options: dict[str, str]) -> None:
    from loaderx.zrecord import upload as put

    put(local, url, storage_options=options)


def measure(
    kind: str,
    work: Path,
    s3: S3sFs | None,
    latencies,
    steps: tuple[int, int],
    args,
    extra: dict[str, str],
) -> list[dict]:
    """The local row; per latency the three cache states over HTTP; then, with
    ``s3``, s3s-fs without a cache and warm at each latency. Each runs in a fresh
    process behind a fresh nginx, so that its counts are its own. ``steps``: the
    batches timed without a cache and cold, then by the local store and warm."""
    local = str(work / "stores" / kind)
    common = ["--kind", kind, "--local", local]
    common += ["--workers", str(args.workers), "--prefetch", str(args.prefetch)]
    budget = 600.0

    def run(
        source: str, cache: Path | None = None, options: dict | None = None, warm: bool = True
    ) -> dict:
        argv = ["-m", __spec__.name, "--worker", "--source", source, *common]
        argv += ["--steps", str(steps[1] if warm else steps[0])]
        if cache is not None:
            argv += ["--cache", str(cache)]
        if options is not None:
            argv += ["--options", json.dumps({**options, **extra})]
        r = run_backend(sys.executable, argv, None, budget)
        r.setdefault("status", "ok")
        return r

    def served(label: str, ms: float, go: Callable[[str], dict], upstream: S3sFs | None) -> dict:
        """``go(url)`` against a fresh nginx waiting ``ms`` before each answer, serving
        the stores (or forwarding to ``upstream``); records the CPU time nginx (and
        the upstream) used meanwhile and what nginx served."""
        root = work / "stores"
        with Nginx(root, delay_ms=ms, upstream=upstream.url if upstream else None) as ng:
            pids = [p for p in (ng.pid(), upstream.pid() if upstream else None) if p]
            before = sum(_tree_cpu(p) for p in pids)
            row = {"label": label, **go(ng.url)}
            row["server_cpu_s"] = sum(_tree_cpu(p) for p in pids) - before
            counts = ng.counts()
        row["requests"] = counts["requests"]
        row["fetched"] = counts["body_bytes"]
        return row

    rows = [{"label": "local store", **run(local)}]
    for ms in latencies:
        cache = work / f"cache-{kind}-{ms:g}"
        for state, cache_dir in (("no cache", None), ("cold", cache), ("warm", cache)):
            label = f"http + {ms:g} ms, {state}"

            def go_http(url: str, c: Path | None = cache_dir, w: bool = state == "warm") -> dict:
                return run(f"{url}/{kind}", c, HTTP_OPTIONS, w)

            rows.append(served(label, ms, go_http, None))
    if s3 is not None:
        for ms in latencies:
            cache = work / f"s3-cache-{kind}-{ms:g}"
            for state, cache_dir in (("no cache", None), ("cold", cache), ("warm", cache)):

                def go(url: str, c: Path | None = cache_dir, w: bool = state == "warm") -> dict:
                    options = {**s3.storage_options(), "aws_endpoint": url}
                    return run(f"s3://{BUCKET}/{kind}", c, options, w)

                rows.append(served(f"s3 (s3s-fs) + {ms:g} ms, {state}", ms, go, s3))
    base = rows[0]
    for r in rows:
        if r["status"] == "ok" and base["status"] == "ok":
            r["vs_local"] = r["records_s"] / base["records_s"]
    return rows


def render(rows: list[dict]) -> str:
    """records/s over the timed steps; "read MiB" is the record values the run took
    (first batch, warm-up, timed steps); "fetched MiB" and "requests" are what the
    nginx sent for the whole run: opening, those batches, and the batches the
    Loader had claimed ahead when the run stopped. "reader CPU" is the measuring
    process's CPU time over its run's wall time (100% is one core), "server CPU" the
    same for nginx (and s3s-fs behind it) over the same span."""
    headers = ["source", "records/s", "vs local", "open s", "read MiB", "fetched MiB"]
    headers += ["requests", "reader CPU", "server CPU"]
    lines = []
    for r in rows:
        if r["status"] != "ok":
            lines.append([r["label"], r["status"], r["reason"][:70], *[""] * 6])
            continue
        line = [r["label"], fmt_num(r["records_s"]), f"{r['vs_local']:.2f}x"]
        line += [f"{r['open_s']:.2f}", fmt_num(r["consumed"] / 2**20)]
        if "fetched" in r:
            line += [fmt_num(r["fetched"] / 2**20), str(r["requests"])]
        else:
            line += ["", ""]
        line.append(f"{r['cpu_s'] / r['run_s']:.0%}")
        line.append(f"{r['server_cpu_s'] / r['run_s']:.0%}" if "server_cpu_s" in r else "")
        lines.append(line)
    return table(headers, lines)


if __name__ == "__main__":
    sys.exit(main())
