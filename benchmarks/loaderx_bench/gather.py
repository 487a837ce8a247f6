"""The random-gather harness of ``loaderx_bench.ragged`` and ``loaderx_bench.dense``.

Both run one worker process per backend and round. A worker writes (first round)
or reopens (later rounds) one store through a ``loaderx_bench.peers`` adapter,
verifies it, warms it up and times fresh IID batches; the main process interleaves
the backends over the rounds, keeps each one's median round and prints a table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loaderx_bench.files import remove_path, sync_tree, warm_files
from loaderx_bench.memory import prefault
from loaderx_bench.peers import make
from loaderx_bench.report import finish_results, fmt_num, start_results, table, write_results
from loaderx_bench.timing import p95, time_calls, warm_up
from loaderx_bench.units import GIB, MIB
from loaderx_bench.workers import emit, peer_python, run_backend

BATCH = 256
CODECS = ("raw", "zstd", "zstd_dict")  # loaderx's, this checkout's and the published
ONE_THREAD = {"LOADERX_NUM_THREADS": "1"}

# (label, peers backend, codec, extra environment): the rows of both tables, in order,
# before the published loaderx's. "hdf5 vlen" is a layout for variable-shape records only.
PEER_ROWS = [
    ("npy-mmap", "npy", "raw", None),
    ("lmdb", "lmdb", "raw", None),
    ("hdf5 vlen", "hdf5", "vlen", None),
    ("hdf5 raw", "hdf5", "raw", None),
    ("hdf5 gzip", "hdf5", "gzip", None),
    ("arrow-ipc", "arrow-ipc", "raw", None),
    ("arrow-ipc zstd", "arrow-ipc", "zstd", None),
    ("arrow-ipc binary", "arrow-ipc", "raw-binary", None),
    ("parquet zstd", "parquet", "zstd", None),
    ("arrayrecord raw", "arrayrecord", "raw", None),
    ("arrayrecord zstd", "arrayrecord", "zstd", None),
    ("lance", "lance", "raw", None),
    *((f"loaderx {c}", "loaderx", c, None) for c in CODECS),
    ("loaderx raw, 1 thread", "loaderx", "raw", ONE_THREAD),
]


class TooSlow(Exception):
    """A backend's first verified batch took longer than allowed."""


@dataclass(frozen=True)
class Expected:
    """What a gather worker checks and counts, whatever the kind of source: the
    number of records, their logical bytes, the exact result for positions (a
    tuple of arrays, named by `names`) and the logical bytes of positions."""

    n: int
    payload_bytes: int
    result: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    payload: Callable[[np.ndarray], int]
    names: tuple[str, ...]


def _parts(got) -> tuple:
    return got if isinstance(got, tuple) else (got,)


def verify(gather, want: Expected, batches: int, max_batch_s: float, seed: int) -> None:
    """Checks `batches` batches (repeated positions; the first and last record in
    the first one) exactly: dtype, shape and values of every part of the result.
    Raises TooSlow when the first batch takes over max_batch_s."""
    rng = np.random.default_rng(seed)
    for k in range(batches):
        idx = rng.integers(0, want.n, BATCH, dtype=np.int64)
        idx[1::8] = idx[0::8]  # repeated positions
        if k == 0:
            idx[-2:] = (0, want.n - 1)
        start = time.perf_counter()
        got = _parts(gather(idx))
        elapsed = time.perf_counter() - start
        for name, g, w in zip(want.names, got, want.result(idx), strict=True):
            g = np.asarray(g)
            if g.dtype != w.dtype or g.shape != w.shape:
                raise AssertionError(f"{name}: got {g.dtype}{g.shape}, expected {w.dtype}{w.shape}")
            if not np.array_equal(g, w):
                raise AssertionError(f"{name} differ from the source for positions {idx[:8]}...")
        if k == 0 and elapsed > max_batch_s:
            raise TooSlow(f"{elapsed:.1f} s per batch (cap {max_batch_s:g} s), verified")


def time_gathers(gather, want: Expected, seconds: float, seed: int, round_: int) -> dict:
    """Warm-up, then fresh IID batches until they sum to `seconds`; each round
    draws its own positions, the same for every backend."""
    warm = np.random.default_rng([seed, 2, round_])
    warm_up(gather, lambda: warm.integers(0, want.n, BATCH, dtype=np.int64), seconds)
    timed = np.random.default_rng([seed, 3, round_])
    drawn: list[np.ndarray] = []

    def draw() -> np.ndarray:
        drawn.append(timed.integers(0, want.n, BATCH, dtype=np.int64))
        return drawn[-1]

    lat = time_calls(gather, draw, seconds)
    total = sum(lat)
    return {
        "status": "ok",
        "krec_s": len(lat) * BATCH / total / 1e3,
        "gib_s": sum(want.payload(i) for i in drawn) / total / GIB,
        "p95_ms": p95(lat) * 1e3,
        "batches": len(lat),
    }


def store_worker(args, src, want: Expected, seed: int) -> None:
    """Worker side: writes the source `src` with the ``peers`` adapter
    ``args.worker`` / ``args.codec`` at ``args.store``, verifies and times it; or
    (``args.reuse``, later rounds) only reopens and times the store an earlier
    round wrote and verified. Prints the result as JSON."""
    store = Path(args.store)
    try:
        peer = make(args.worker, store, args.codec)
        version = peer.version()
        if args.reuse:
            peer.set_layout(src)
        else:
            peer.prepare(src)
    except ImportError as e:
        return emit({"status": "unavailable", "reason": f"cannot import: {e}"})
    result = {"version": version}
    if not args.reuse:
        prefault(want.payload_bytes)
        os.sync()  # earlier backends' dirty pages are not this one's to write
        start = time.perf_counter()
        peer.write(src)
        sync_tree(store)
        write_s = time.perf_counter() - start
        result.update(
            write_s=write_s,
            write_mib_s=want.payload_bytes / MIB / write_s,
            disk_mib=peer.disk_bytes() / MIB,
            train_s=getattr(peer, "train_s", None),
            dict_kib=getattr(peer, "dict_size", None) and peer.dict_size / 1024,
        )
    warm_files(store)
    peer.open()
    if not args.reuse:
        try:
            verify(peer.gather, want, args.verify, args.max_batch_s, seed + 1)
        except TooSlow as e:
            return emit({**result, "status": "too slow", "reason": str(e)})
    result.update(time_gathers(peer.gather, want, args.seconds, seed, args.round))
    peer.close()
    emit(result)


# A plan entry: (label, interpreter, backend, codec, extra environment, label of the
# published-loaderx row to compare with).
PlanRow = tuple[str, str | os.PathLike[str] | None, str, str, dict | None, str | None]


def gather_plan(
    peer_rows: Sequence[tuple[str, str, str, dict | None]],
    codecs: Sequence[str],
    peer: tuple[Path | None, str],
    rows: str | None,
    tail: Sequence[PlanRow] = (),
) -> list[PlanRow]:
    """The rows of one table: `peer_rows` (label, backend, codec, environment) run by
    this interpreter, the published loaderx (``peer_python``'s answer) for every
    codec, then `tail`; only the labels containing one of the comma-separated
    `rows` when given. loaderx rows are compared with the published one."""
    peer_py, peer_version = peer
    published = f"loaderx {peer_version}" if peer_py else "loaderx 2.8.6"
    plan: list[PlanRow] = [
        (label, sys.executable, b, c, env, f"{published} {c}" if b == "loaderx" else None)
        for label, b, c, env in peer_rows
    ]
    plan += [(f"{published} {c}", peer_py, "loaderx", c, None, None) for c in codecs]
    plan += tail
    if rows:
        wanted = [w.strip() for w in rows.split(",")]
        plan = [p for p in plan if any(w in p[0] for w in wanted)]
    return plan


def measure_plan(
    plan: Sequence[PlanRow],
    module: str,
    src_args: Sequence[str],
    verify: int,
    root: Path,
    name: str,
    args,
    peer_note: str,
) -> list[dict]:
    """Runs every row of `plan` in ``args.rounds`` interleaved rounds, each in a fresh
    worker (``python -m module`` with the timing options of `args`, ``--verify
    verify``, ``--src *src_args`` and the row's backend, codec, store and round); the
    first round writes and verifies, the later ones reopen its store. Returns the rows
    with the first round's results and the timed figures of the median round by
    records/s; a row that fails, is too slow or could not run keeps its status and
    reason. Stores go to ``root/<name>-<i>`` and are removed at the end."""
    base_argv = ["-m", module, "--seconds", str(args.seconds)]
    base_argv += ["--max-batch-s", str(args.max_batch_s), "--verify", str(verify)]
    base_argv += ["--src", *src_args]
    rows = []
    for label, python, backend, codec, env, vs_peer in plan:
        r = {"label": label, "backend": backend, "codec": codec, "vs_peer": vs_peer}
        r.update({"env": env} if env else {})
        if python is None:
            r.update(status="not run", reason=peer_note)
        rows.append(r)
    try:
        for k in range(args.rounds):
            for i, (label, python, backend, codec, env, _) in enumerate(plan):
                r = rows[i]
                if r.get("status", "ok") != "ok":
                    continue  # not run, or failed / too slow in round 1
                store = root / f"{name}-{i}"
                argv = [*base_argv, "--worker", backend, "--codec", codec]
                argv += ["--store", str(store), "--round", str(k)] + (["--reuse"] if k else [])
                started = time.perf_counter()
                got = run_backend(python, argv, env, args.budget)
                got["wall_s"] = time.perf_counter() - started
                if k == 0:
                    r.update(got)
                r.setdefault("rounds", []).append(got)
                if got["status"] != "ok":
                    r.update(status=got["status"], reason=got["reason"])
                    remove_path(store)
                note = got["status"] if got["status"] != "ok" else f"{got['krec_s']:.1f} krec/s"
                print(f"  round {k + 1} {label}: {note} ({got['wall_s']:.0f} s)", file=sys.stderr)
    finally:
        for i in range(len(plan)):
            remove_path(root / f"{name}-{i}")
    for r in rows:
        if r.get("status") == "ok":
            ok = sorted(r["rounds"], key=lambda g: g["krec_s"])
            median = ok[len(ok) // 2]
            r.update({k: median[k] for k in ("krec_s", "gib_s", "p95_ms", "batches")})
    return rows


def render_gathers(
    info: dict, rows: list[dict], versus: Sequence[tuple[str, str | None]], footnote: str
) -> str:
    """A workload's table, then the rows that were not measured and dictionary notes.
    `versus`: (column header, label of the row to compare records/s with; None for
    the row's own ``vs_peer``)."""
    by = {r["label"]: r for r in rows}
    headers = ["backend", "write MiB/s", "disk MiB", "krec/s", "GiB/s", "p95 ms"]
    headers += [h for h, _ in versus]
    lines, notes = [], []
    for r in rows:
        if r["status"] != "ok":
            notes.append(f"- {r['label']}: {r['status']}: {r['reason']}")
            continue
        ratios = []
        for _, base_label in versus:
            base = by.get((r.get("vs_peer") or "") if base_label is None else base_label)
            ok = base is not None and base.get("status") == "ok"
            ratios.append(fmt_num(r["krec_s"] / base["krec_s"]) + "x" if ok else "-")
        write = r.get("write_mib_s")
        lines.append(
            [
                r["label"],
                "-" if write is None else f"{write:.0f}",
                "-" if r.get("disk_mib") is None else f"{r['disk_mib']:.1f}",
                fmt_num(r["krec_s"]),
                f"{r['gib_s']:.2f}",
                f"{r['p95_ms']:.2f}",
                *ratios,
            ]
        )
        if r.get("dict_kib"):
            notes.append(
                f"- {r['label']}: {r['dict_kib']:.0f} KiB dictionary, train_dict "
                f"{r['train_s']:.2f} s (not part of the write time)"
            )
    return "\n".join([info["title"], "", table(headers, lines), "", footnote, *notes])


def run_gather_bench(script: str, args, workloads, bench_workload, render) -> None:
    """Main side of ``scripts/bench_ragged.py`` / ``scripts/bench_dense.py``: prints
    the machine and checkout, then for every workload (``args.only``) runs
    ``bench_workload(name, root, args, peer) -> {"info", "rows"}`` and prints
    ``render(info, rows)``; with ``args.json`` writes all results there
    (rewritten after each workload)."""
    root = Path(tempfile.mkdtemp(prefix=f"loaderx-{script.replace('_', '-')}-", dir=args.dir))
    peer = peer_python(args.peer_python)
    started = time.perf_counter()
    results = start_results(script, quick=args.quick, seconds=args.seconds, rounds=args.rounds)
    try:
        for name in workloads:
            if args.only not in (None, name):
                continue
            res = bench_workload(name, root, args, peer)
            results["workloads"][name] = res
            print("\n" + render(res["info"], res["rows"]), flush=True)
            versions = sorted({r["version"] for r in res["rows"] if r.get("version")})
            print("Versions: " + ", ".join(versions), flush=True)
            if args.json:
                write_results(args.json, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    finish_results(results, started, args.json)


def gather_arguments(ap: argparse.ArgumentParser, workloads) -> None:
    """The options the ragged and dense gathers share, and their workers' ones."""
    ap.add_argument("--quick", action="store_true", help="0.3 s per backend, fewer records")
    ap.add_argument("--synthetic", action="store_true", help="synthetic data, not data/")
    ap.add_argument("--dir", help="where sources and stores go (default: a new temporary folder)")
    ap.add_argument("--peer-python", help="interpreter of a venv with loaderx 2.8.6")
    ap.add_argument("--only", choices=sorted(workloads), help="run one workload")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--rounds", type=int, help="interleaved timing rounds (3; --quick: 1)")
    ap.add_argument("--rows", help="only rows whose label contains one of these (comma-separated)")
    ap.add_argument("--budget", type=float, help="seconds per backend (600; --quick: 60)")
    ap.add_argument(
        "--max-batch-s", type=float, help="a slower first batch is 'too slow' (10; --quick: 2)"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--src", nargs="+", help=argparse.SUPPRESS)
    for hidden in ("--store", "--codec"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--verify", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--reuse", action="store_true", help=argparse.SUPPRESS)


def gather_defaults(args) -> None:
    """Fills in the defaults that depend on ``--quick``."""
    args.seconds = args.seconds or (0.3 if args.quick else 2.0)
    args.budget = args.budget or (60.0 if args.quick else 600.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.max_batch_s = args.max_batch_s or (2.0 if args.quick else 10.0)
