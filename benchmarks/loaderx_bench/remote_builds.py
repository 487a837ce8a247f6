"""Warm block caches of several loaderx builds side by side, behind one server.

The remote counterpart of ``loaderx_bench.builds``: every revision (default
``849a1e7^ HEAD``: the last build that mapped cache blocks and this one) is built
once into its own venv by ``builds.build``. Two workloads, raw stores of the same
sources as ``scripts/bench_remote.py`` (real data under ``data/`` when prepared,
otherwise synthetic data of the same geometry; the output says which):

* images: Dense uint8 (3, 224, 224) records, batch 64;
* tokens: Ragged int32 token sequences, batch 256.

The stores are written once, by the first build (so that every build reads the
same bytes, in a format the oldest reads), and served by one nginx on 127.0.0.1
(``loaderx_bench.servers``) for the whole run; every build reads the same URLs.

Before anything is timed, each build fills a cache directory of its own: it reads
every record of the store through the server in order, into that cache, and
compares each batch with the local store's records; then random batches read
again through the now warm cache must equal the local store's too. Then the runs,
each in a fresh process of one build (``loaderx_bench.remote``'s worker: open, a
first batch checked against the local store, a warm-up, then ``--steps`` timed
random batches through the Loader): the local store, then the URL with the
build's warm cache; then the same two gathered straight from the reader, without
the Loader (``gather``), which leaves out what the builds' Loaders do differently.
Runs alternate between the builds, ``--runs`` (5) of each, so that load on the
machine falls on all of them alike.

Printed, for the Loader and for bare gathers: per workload and build, the median
records/s of the local store and of the warm cache over the runs, their ratio,
and the spread of the warm runs ((max - min) / median), the noise a ratio must be
read against; then the warm rate of each build against the first one's.

Needs what ``loaderx_bench.builds`` needs, and nginx (``apt-get install -y nginx``).
``--quick``: synthetic data, short runs, 2 of each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench import remote
from loaderx_bench.builds import build, git
from loaderx_bench.loader import dense_source, ragged_source
from loaderx_bench.machine import load_average, machine
from loaderx_bench.paths import DATA
from loaderx_bench.report import fmt_num, table, write_results
from loaderx_bench.servers import Nginx
from loaderx_bench.workers import emit, run_backend

DEFAULT_REVS = ("849a1e7^", "HEAD")
KINDS = {"dense": "images", "ragged": "tokens"}
# Records per batch of the filling pass: whole blocks' worth, in order.
FILL_BATCH = {"dense": 64, "ragged": 4096}


# -- workers (run by each build's interpreter) --------------------------------------


def write_stores(dense: str, tokens: str, offsets: str, out: str) -> None:
    from loaderx_bench.loader import build_stores

    build_stores(Path(dense), Path(tokens), Path(offsets), Path(out))
    emit({"status": "ok"})


def fill(kind: str, url: str, local_path: str, cache: str, checks: int) -> None:
    """Reads every record of `url` in order through the cache directory `cache`,
    comparing each batch with the local store; then `checks` random batches
    through the warm cache. Emits how many records were compared."""
    options = remote.HTTP_OPTIONS
    local = remote.open_store(kind, local_path, None)
    reader = remote.open_store(kind, url, cache, options)
    n = len(local)
    if len(reader) != n:
        raise AssertionError(f"{kind}: {len(reader)} records through the server, {n} local")
    step = FILL_BATCH[kind]
    for start in range(0, n, step):
        ids = np.arange(start, min(start + step, n))
        if not remote.same(kind, reader[ids], local[ids]):
            raise AssertionError(f"{kind}: records {start}.. differ from the local store")
    del reader
    warm = remote.open_store(kind, url, cache, options)
    rng = np.random.default_rng(5)
    for _ in range(checks):
        ids = rng.integers(0, n, remote.BATCH[kind])
        if not remote.same(kind, warm[ids], local[ids]):
            raise AssertionError(f"{kind}: a random batch from the warm cache differs")
    emit({"status": "ok", "records": n, "checks": checks})


def gather(kind: str, source: str, cache: str | None, steps: int) -> None:
    """Times `steps` random batches gathered straight from the reader of `source`
    (no Loader), after a warm-up of a tenth as many. The values were checked by
    `fill`, in the same cache, before any run."""
    options = remote.HTTP_OPTIONS if "://" in source else None
    reader = remote.open_store(kind, source, cache, options)
    batch = remote.BATCH[kind]
    rng = np.random.default_rng(3)
    draws = [rng.integers(0, len(reader), batch) for _ in range(steps + steps // 10)]
    for ids in draws[: steps // 10]:
        np.from_dlpack(reader[ids] if kind == "dense" else reader[ids].values)
    start = time.perf_counter()
    for ids in draws[steps // 10 :]:
        got = reader[ids]
        np.from_dlpack(got if kind == "dense" else got.values)
    elapsed = time.perf_counter() - start
    emit({"status": "ok", "records_s": steps * batch / elapsed})


# -- driver ------------------------------------------------------------------------


def measure(kind: str, work: Path, server: Nginx, builds, args) -> list[dict]:
    """The verified fill of each build's cache, then the alternating runs."""
    local = str(work / "stores" / kind)
    url = f"{server.url}/{kind}"
    caches = {short: work / f"cache-{kind}-{short}" for short, _ in builds}
    for short, python in builds:
        argv = ["-m", __spec__.name, "--worker", "fill", kind, url, local, str(caches[short])]
        got = run_backend(python, argv, None, 1800.0)
        if got.get("status") != "ok":
            raise RuntimeError(f"{short}, {kind}: the check failed: {got.get('reason')}")
        print(
            f"  {short}: all {got['records']:,} {KINDS[kind]} read through the server into "
            f"its cache equal the local store's, and {got['checks']} random batches from "
            "the warm cache",
            flush=True,
        )
    sources = ("local", "warm", "local gather", "warm gather")
    rows = {(short, src): [] for short, _ in builds for src in sources}
    served: list[dict[str, int]] = []
    common = ["--kind", kind, "--local", local, "--steps", str(args.steps[kind])]
    common += ["--workers", str(args.workers), "--prefetch", str(args.prefetch)]
    for k in range(args.rounds):
        for short, python in builds:
            for src in sources:
                argv = ["-m", remote.__spec__.name, "--worker", *common]
                if src == "local":
                    argv += ["--source", local]
                elif src == "warm":
                    argv += ["--source", url, "--cache", str(caches[short])]
                    argv += ["--options", json.dumps(remote.HTTP_OPTIONS)]
                else:
                    cache = str(caches[short]) if src == "warm gather" else "-"
                    where = url if src == "warm gather" else local
                    steps = str(args.steps[kind])
                    argv = ["-m", __spec__.name, "--worker", "gather", kind, where, cache, steps]
                server.reset_counts()
                got = run_backend(python, argv, None, 600.0)
                if src.startswith("warm"):
                    served.append(server.counts())
                if got.get("status", "ok") != "ok":
                    raise RuntimeError(f"{short} {src} {kind}: {got['status']}: {got['reason']}")
                rows[(short, src)].append(got["records_s"])
                print(
                    f"  round {k + 1} {short} {src}: {got['records_s']:.0f} records/s",
                    file=sys.stderr,
                )
    print(
        f"  every warm run: at most {max(c['requests'] for c in served)} requests and "
        f"{max(c['body_bytes'] for c in served):,} body bytes served (opening the store)",
        flush=True,
    )
    return [
        {"kind": kind, "build": short, "source": src, "records_s": rates}
        for (short, src), rates in rows.items()
    ]


def summarize(rows: list[dict], builds, through: str) -> str:
    """One line per workload and build: median records/s of the local store and
    of the warm cache (``through`` "" for the Loader, " gather" for bare
    gathers), their ratio, the warm runs' spread, and the warm median against the
    first build's."""
    by = {(r["kind"], r["build"], r["source"]): r["records_s"] for r in rows}
    first = builds[0][0]
    lines = []
    for kind in KINDS:
        if (kind, first, "warm" + through) not in by:
            continue
        base = statistics.median(by[(kind, first, "warm" + through)])
        for short, _ in builds:
            loc = statistics.median(by[(kind, short, "local" + through)])
            runs = by[(kind, short, "warm" + through)]
            warm = statistics.median(runs)
            spread = (max(runs) - min(runs)) / warm
            lines.append(
                [
                    f"{KINDS[kind]}, {short}",
                    fmt_num(loc),
                    fmt_num(warm),
                    f"{warm / loc:.2f}x",
                    f"{spread:.0%}",
                    f"{warm / base:.2f}x",
                ]
            )
    headers = ["workload, build", "local records/s", "warm records/s", "warm vs local"]
    headers += ["warm spread", f"warm vs {first}"]
    return table(headers, lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="*", default=list(DEFAULT_REVS), help="git revisions")
    ap.add_argument("--cache", type=Path, default=DATA / "builds", help="builds' folder")
    ap.add_argument("--rebuild", action="store_true", help="build again even if cached")
    ap.add_argument("--runs", type=int, help="runs of each build (5; --quick: 2)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="synthetic data, short runs")
    ap.add_argument("--dir", help="where sources, stores and caches go (default: a new temp dir)")
    ap.add_argument("--json", help="also write every run's results to this JSON file")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        what, *rest = args.worker
        if what == "stores":
            write_stores(*rest)
        elif what == "gather":
            kind, source, cache, steps = rest
            gather(kind, source, None if cache == "-" else cache, int(steps))
        else:
            fill(rest[0], rest[1], rest[2], rest[3], 2 if args.quick else 20)
        return 0
    args.rounds = args.runs or (2 if args.quick else 5)
    args.steps = {"dense": 40, "ragged": 200} if args.quick else {"dense": 400, "ragged": 4000}
    args.cache.mkdir(parents=True, exist_ok=True)
    builds: list[tuple[str, Path]] = []
    revs: list[str] = []
    for rev in args.revs:
        short, python = build(rev, args.cache.resolve(), args.rebuild)
        if short not in (s for s, _ in builds):
            builds.append((short, python))
            revs.append(rev)
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "crates", "python")
    started = time.perf_counter()
    print(f"Machine: {machine()}")
    print(f"Builds: {', '.join(f'{s} ({r})' for (s, _), r in zip(builds, revs, strict=True))}")
    if "HEAD" in revs and dirty:
        print("HEAD is the commit: uncommitted changes in crates/ or python/ are not built")
    print(f"Load average at start: {load_average()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="loaderx-remote-builds-", dir=args.dir))
    rows: list[dict] = []
    try:
        (work / "src").mkdir()
        (work / "stores").mkdir()
        dense, dense_note = dense_source(args.quick, work / "src")
        tokens, offsets, tok_note = ragged_source(args.quick, work / "src")
        argv = ["-m", __spec__.name, "--worker", "stores"]
        argv += [str(dense), str(tokens), str(offsets), str(work / "stores")]
        got = run_backend(builds[0][1], argv, None, 1800.0)
        if got.get("status") != "ok":
            raise RuntimeError(f"writing the stores failed: {got.get('reason')}")
        print(f"images: uint8 (3, 224, 224), {dense_note}; tokens: {tok_note}")
        print(f"stores written by {builds[0][0]}, served by nginx on 127.0.0.1")
        print(f"Loader workers={args.workers}, prefetch={args.prefetch}")
        with Nginx(work / "stores", workers=1) as server:
            for kind in KINDS:
                print(f"\n{KINDS[kind]}:", flush=True)
                rows += measure(kind, work, server, builds, args)
        print(
            f"\nRandom IID batches (images {args.steps['dense']} of "
            f"{remote.BATCH['dense']}, tokens {args.steps['ragged']} of "
            f"{remote.BATCH['ragged']} per run); median of {args.rounds} runs, each in its "
            "own process, builds alternating; the warm cache is the build's own, filled by "
            "the check.\n\nThrough the Loader:\n"
        )
        print(summarize(rows, builds, ""))
        print("\nGathered straight from the reader (no Loader):\n")
        print(summarize(rows, builds, " gather"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    wall = time.perf_counter() - started
    print(f"\nLoad average at end: {load_average()}; {wall:.0f} s in all")
    if args.json:
        results = {"machine": machine(), "revs": revs, "builds": [s for s, _ in builds]}
        results.update(runs=args.rounds, steps=args.steps, wall_s=wall, rows=rows)
        write_results(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
