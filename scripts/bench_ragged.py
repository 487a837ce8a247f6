"""Random batch gather of variable-shape records, against the stores a user might pick instead.

Every backend persists each record's payload plus its exact shape and, inside one
timed call, turns a batch of positions into the same compute-ready packed form:
``values`` (all elements laid end to end), ``cu_seqlens`` (n + 1 int32 element
offsets) and ``shapes`` (n x ndim uint64). loaderx returns exactly that as a
RaggedBatch (consumed with ``np.from_dlpack``); the others build it. The adapters
live in ``_peers.py`` (their docstrings say how each store is laid out and read):
npy memory map, LMDB, HDF5 (a vlen dataset; one dataset per record, raw and with
one gzip chunk each), Arrow IPC (memory-mapped: raw ``list<T>``, zstd record
batches, raw ``large_binary``), Parquet (zstd), ArrayRecord (raw and zstd,
``group_size:1``), Lance (its defaults), loaderx of this checkout (raw, zstd, zstd_dict, and raw
with ``LOADERX_NUM_THREADS=1``) and the published loaderx 2.8.6 in its own venv
(``--peer-python``, default ``.venv-peer``), run as a black box with the same calls.

Data: the real corpora under ``data/`` made by ``scripts/prepare_tokens.py`` (GPT-2
token records of Debian documentation prose, int32, 16..512 ids) and
``scripts/prepare_vision.py`` (photographs at native resolution, uint8 (3, H, W)).
``--synthetic``, or a missing ``data/``, falls back to deterministic synthetic data of
the same kind, and the output says so. ``--quick`` takes a prefix of the records.

Writes: every backend starts from the same prepared source (memory-mapped .npy
values, int32 offsets and uint64 shapes) and writes it completely, loaderx in one
``append`` of a RaggedBatch built from those arrays. Write time covers adaptation,
writing and publishing (each backend's own close/commit), not writer setup or
dictionary training, which is reported separately.

Gathers: each backend runs in a fresh worker process. It first verifies batches
with repeated positions plus the first and last record against the source (dtype,
values, cu_seqlens and shapes, exactly), then warms up on the page cache (the
files are read once, then a few batches), then times fresh uniform IID batches of
256 positions until they sum to >= 2 s (``--quick``: 0.3 s). All backends see the
same positions. Drawing the positions and dropping the result are outside the
timed span. The machine is shared, so every backend is timed in ``--rounds``
rounds (default 3; ``--quick``: 1) interleaved with the others, each round in a
fresh process with fresh positions; the first round also writes and verifies, the
later ones reopen that store. The table shows each backend's median round by
records/s. A backend whose first batch takes longer than ``--max-batch-s``, or
whose worker runs past ``--budget`` seconds, is reported as too slow; one whose
package cannot be imported as unavailable; nothing is dropped silently.

``--json PATH`` also writes the results for ``scripts/plot_benchmarks.py``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _bench_common import (
    GIB,
    MIB,
    REPO,
    checkout,
    emit,
    load_average,
    machine,
    one_bench_at_a_time,
    p95,
    peer_python,
    table,
    time_calls,
)
from _peers import RaggedSource, make

BATCH = 256
SEED = 20240607
VOCAB = 50257
# verify: correctness batches before timing. quick_n: the prefix --quick uses (the
# first 80 photos are small, so a quick images batch is about 50 MiB, not 400).
WORKLOADS = {
    "tokens": {"quick_n": 20_000, "verify": 100, "quick_verify": 10, "synthetic_n": 200_000},
    "images": {"quick_n": 80, "verify": 5, "quick_verify": 2, "synthetic_n": 300},
}
CODECS = ("raw", "zstd", "zstd_dict")
WARM_BATCHES = 20  # at most; warm-up also stops after the timed span's length
ONE_THREAD = {"LOADERX_NUM_THREADS": "1"}

# (label, _peers backend, codec, extra environment): the table's rows, in order.
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
    pass


# ---- sources: the real data under data/, or synthetic ----------------------------------


def _zipf(rng: np.random.Generator, count: int, size: int, a: float) -> np.ndarray:
    """`count` ranks in 0..size-1 drawn with probability proportional to 1/(rank+1)^a."""
    weights = 1.0 / np.arange(1, size + 1) ** a
    cdf = np.cumsum(weights) / weights.sum()
    return np.minimum(np.searchsorted(cdf, rng.random(count)), size - 1)


def _synthetic_tokens(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, lengths) of `n` token records: a stream of single Zipf(1.1) ids (two
    thirds) and recurring 2..8-id phrases (one third), cut at log-normal lengths
    (median 130) clipped to 16..512."""
    vocab = np.random.default_rng(SEED).permutation(VOCAB).astype(np.int32)
    lengths = np.clip(np.rint(rng.lognormal(np.log(130), 0.75, n)), 16, 512).astype(np.int64)
    total = int(lengths.sum())
    phrase_len = rng.integers(2, 9, 5000)
    phrases = vocab[_zipf(rng, int(phrase_len.sum()), VOCAB, 1.1)]
    phrase_at = np.cumsum(phrase_len) - phrase_len
    units = total // 2 + 64  # a unit holds 2.33 ids on average: enough for `total`
    singles = vocab[_zipf(rng, units, VOCAB, 1.1)]
    pick = _zipf(rng, units, len(phrase_len), 1.0)
    is_phrase = rng.random(units) < 1 / 3
    pool = np.concatenate([phrases, singles])
    ustart = np.where(is_phrase, phrase_at[pick], len(phrases) + np.arange(units))
    ulen = np.where(is_phrase, phrase_len[pick], 1)
    out_at = np.cumsum(ulen) - ulen
    stream = pool[np.repeat(ustart - out_at, ulen) + np.arange(int(ulen.sum()))]
    return stream[:total], lengths


def _synthetic_images(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """`n` uint8 (3, H, W) smooth colour fields (H, W in 100..700) with +-1 noise."""
    out = []
    for _ in range(n):
        h, w = (int(v) for v in rng.integers(100, 701, 2))
        low = rng.random((3, h // 48 + 2, w // 48 + 2), dtype=np.float32) * 255
        y = np.linspace(0, low.shape[1] - 1.001, h, dtype=np.float32)
        x = np.linspace(0, low.shape[2] - 1.001, w, dtype=np.float32)
        y0, x0 = y.astype(np.int64), x.astype(np.int64)
        ty, tx = (y - y0)[None, :, None], (x - x0)[None, None, :]
        rows = low[:, y0] * (1 - ty) + low[:, y0 + 1] * ty
        pixels = rows[:, :, x0] * (1 - tx) + rows[:, :, x0 + 1] * tx
        pixels += rng.integers(-1, 2, (3, h, w))
        out.append(np.clip(pixels, 0, 255).astype(np.uint8))
    return out


def _write_synthetic(root: Path, name: str, n: int) -> Path:
    rng = np.random.default_rng(SEED + (name == "images"))
    if name == "tokens":
        values, lengths = _synthetic_tokens(rng, n)
        shapes = lengths.astype(np.uint64).reshape(-1, 1)
    else:
        records = _synthetic_images(rng, n)
        values = np.concatenate([r.reshape(-1) for r in records])
        shapes = np.array([r.shape for r in records], dtype=np.uint64)
    np.save(root / "values.npy", values)
    return _write_index(root, np.concatenate([[0], np.cumsum(np.prod(shapes, 1))]), shapes)


def _write_index(root: Path, offsets: np.ndarray, shapes: np.ndarray) -> Path:
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("the workload overflows int32 offsets")
    np.save(root / "offsets.npy", np.asarray(offsets).astype(np.int32))
    np.save(root / "shapes.npy", np.ascontiguousarray(shapes, dtype=np.uint64))
    return root


REAL = {
    "tokens": ("data/tokens/tokens.npy", "data/tokens/offsets.npy", None),
    "images": (
        "data/vision/ragged_values.npy",
        "data/vision/ragged_offsets.npy",
        "data/vision/ragged_shapes.npy",
    ),
}


def real_available(name: str) -> bool:
    return all((REPO / f).exists() for f in REAL[name] if f)


def prepare_source(root: Path, name: str, quick: bool, synthetic: bool) -> tuple[list[str], str]:
    """Writes the int32 offsets and uint64 shapes of workload `name` under `root`
    (values stay where they are, memory-mapped); returns the three paths for the
    workers and what the data are."""
    root.mkdir(parents=True, exist_ok=True)
    spec = WORKLOADS[name]
    if synthetic:
        n = spec["quick_n"] if quick else spec["synthetic_n"]
        _write_synthetic(root, name, n)
        values, kind = root / "values.npy", "synthetic (deterministic)"
    else:
        values_rel, offsets_rel, shapes_rel = REAL[name]
        offsets = np.load(REPO / offsets_rel, mmap_mode="r")
        n = min(spec["quick_n"], len(offsets) - 1) if quick else len(offsets) - 1
        offsets = np.asarray(offsets[: n + 1])
        if shapes_rel:
            shapes = np.load(REPO / shapes_rel, mmap_mode="r")[:n]
        else:
            shapes = np.diff(offsets).astype(np.uint64).reshape(-1, 1)
        _write_index(root, offsets, shapes)
        values = REPO / values_rel
        script = "prepare_tokens.py" if name == "tokens" else "prepare_vision.py"
        kind = f"real, {values_rel} (scripts/{script})"
    return [str(values), str(root / "offsets.npy"), str(root / "shapes.npy")], kind


def describe(name: str, src: RaggedSource, kind: str) -> dict:
    """Size and shape statistics of a workload, for the table's title and the JSON."""
    shapes = np.asarray(src.shapes)
    info = {"records": src.n, "payload_mib": src.payload_bytes / MIB, "data": kind}
    if name == "tokens":
        lengths = shapes[:, 0]
        p10, med, p90 = np.percentile(lengths, [10, 50, 90])
        text = (
            f"int32 token records of {lengths.min()}..{lengths.max()} ids (p10 {p10:.0f}, "
            f"median {med:.0f}, mean {lengths.mean():.1f}, p90 {p90:.0f})"
        )
    else:
        h, w = shapes[:, 1], shapes[:, 2]
        text = (
            f"uint8 (3, H, W) images, H {h.min()}..{h.max()} (median {np.median(h):.0f}), "
            f"W {w.min()}..{w.max()} (median {np.median(w):.0f}), "
            f"mean {src.payload_bytes / src.n / MIB:.2f} MiB per record"
        )
    info["title"] = (
        f"{name}: {src.n:,} {text}, {info['payload_mib']:.1f} MiB payload; data: {kind}; "
        f"random IID batches of {BATCH}"
    )
    return info


# ---- worker side: one backend in its own process --------------------------------------


def _warm_files(path: Path) -> None:
    """Reads every byte once so the timed gathers run on a warm page cache."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.read(8 << 20):
                pass


def _warm_array(a: np.ndarray) -> None:
    """Touches every page of a (memory-mapped) array."""
    flat = np.asarray(a).reshape(-1).view(np.uint8)
    buf = np.empty(8 << 20, dtype=np.uint8)
    for at in range(0, len(flat), len(buf)):
        part = flat[at : at + len(buf)]
        np.copyto(buf[: len(part)], part)


def _warm_up(call, draw, seconds: float) -> None:
    """Up to WARM_BATCHES calls, stopping early once `seconds` have passed."""
    until = time.perf_counter() + seconds
    for _ in range(WARM_BATCHES):
        call(draw())
        if time.perf_counter() > until:
            break


def _check(got, want, idx: np.ndarray) -> None:
    names = ("values", "cu_seqlens", "shapes")
    for name, g, w in zip(names, got, want, strict=True):
        g = np.asarray(g)
        if g.dtype != w.dtype or g.shape != w.shape:
            raise AssertionError(f"{name}: got {g.dtype}{g.shape}, expected {w.dtype}{w.shape}")
        if not np.array_equal(g, w):
            raise AssertionError(f"{name} differ from the source for positions {idx[:8]}...")


def _verify(gather, src: RaggedSource, batches: int, max_batch_s: float) -> None:
    """Checks `batches` batches (repeated positions; the first and last record in
    the first one) exactly; raises TooSlow when the first takes over max_batch_s."""
    rng = np.random.default_rng(SEED + 1)
    for k in range(batches):
        idx = rng.integers(0, src.n, BATCH, dtype=np.int64)
        idx[1::8] = idx[0::8]  # repeated positions
        if k == 0:
            idx[-2:] = (0, src.n - 1)
        start = time.perf_counter()
        got = gather(idx)
        elapsed = time.perf_counter() - start
        _check(got, src.pack(idx), idx)
        if k == 0 and elapsed > max_batch_s:
            raise TooSlow(f"{elapsed:.1f} s per batch (cap {max_batch_s:g} s), verified")


def _time(peer, src: RaggedSource, args: argparse.Namespace) -> dict:
    """Warm-up, then fresh IID batches until they sum to args.seconds; each round
    draws its own positions, the same for every backend."""
    draws = np.random.default_rng([SEED, 2, args.round])
    _warm_up(peer.gather, lambda: draws.integers(0, src.n, BATCH, dtype=np.int64), args.seconds)
    timed = np.random.default_rng([SEED, 3, args.round])
    drawn: list[np.ndarray] = []

    def draw() -> np.ndarray:
        drawn.append(timed.integers(0, src.n, BATCH, dtype=np.int64))
        return drawn[-1]

    lat = time_calls(peer.gather, draw, args.seconds)
    total = sum(lat)
    return {
        "status": "ok",
        "krec_s": len(lat) * BATCH / total / 1e3,
        "gib_s": sum(src.payload(i) for i in drawn) / total / GIB,
        "p95_ms": p95(lat) * 1e3,
        "batches": len(lat),
    }


def worker(args: argparse.Namespace) -> None:
    """Writes, verifies and times one backend, or (``--reuse``, later rounds) only
    reopens and times the store an earlier round wrote and verified; prints the
    result as JSON."""
    src = RaggedSource.load(*args.src)
    _warm_array(src.values)
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
        start = time.perf_counter()
        peer.write(src)
        write_s = time.perf_counter() - start
        result.update(
            write_s=write_s,
            write_mib_s=src.payload_bytes / MIB / write_s,
            disk_mib=peer.disk_bytes() / MIB,
            train_s=getattr(peer, "train_s", None),
            dict_kib=getattr(peer, "dict_size", None) and peer.dict_size / 1024,
        )
    _warm_files(store)
    peer.open()
    if not args.reuse:
        try:
            _verify(peer.gather, src, args.verify, args.max_batch_s)
        except TooSlow as e:
            return emit({**result, "status": "too slow", "reason": str(e)})
    result.update(_time(peer, src, args))
    peer.close()
    emit(result)


# ---- main side: orchestrate workers and print tables ------------------------------------


def run_backend(python, argv: list[str], env: dict | None, budget: float) -> dict:
    """Runs one worker with a wall-clock budget (``_bench_common.run_worker`` has
    none); a worker past it is reported as too slow, a crash as failed."""
    try:
        proc = subprocess.run(
            [str(python), *argv],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            timeout=budget,
        )
    except subprocess.TimeoutExpired:
        return {"status": "too slow", "reason": f"did not finish within {budget:g} s"}
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        return {"status": "failed", "reason": f"exit {proc.returncode}: {tail[0][:300]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _num(x: float) -> str:
    """Two or three significant digits, never rounding a small value to 0."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def _ratio(r: dict, base: dict | None) -> str:
    if base is None or base.get("status") != "ok":
        return "-"
    return _num(r["krec_s"] / base["krec_s"]) + "x"


def render(info: dict, rows: list[dict]) -> str:
    """The workload's table, the rows that were not measured and dictionary notes."""
    by = {r["label"]: r for r in rows}
    peer_of = {r["label"]: by.get(r.get("vs_peer", "")) for r in rows}
    headers = ["backend", "write MiB/s", "disk MiB", "krec/s", "GiB/s", "p95 ms"]
    headers += ["vs LMDB", "vs Arrow", "vs 2.8.6"]
    lines, notes = [], []
    for r in rows:
        if r["status"] != "ok":
            notes.append(f"- {r['label']}: {r['status']}: {r['reason']}")
            continue
        lines.append(
            [
                r["label"],
                f"{r['write_mib_s']:.0f}",
                f"{r['disk_mib']:.1f}",
                _num(r["krec_s"]),
                f"{r['gib_s']:.2f}",
                f"{r['p95_ms']:.2f}",
                _ratio(r, by.get("lmdb")),
                _ratio(r, by.get("arrow-ipc")),
                _ratio(r, peer_of[r["label"]]),
            ]
        )
        if r.get("dict_kib"):
            notes.append(
                f"- {r['label']}: {r['dict_kib']:.0f} KiB dictionary, train_dict "
                f"{r['train_s']:.2f} s (not part of the write time)"
            )
    out = [info["title"], "", table(headers, lines), ""]
    out.append(
        "Ratios are records/s; 'vs Arrow' is against arrow-ipc (list<T> payload), "
        "'vs 2.8.6' against the published loaderx with the same codec."
    )
    return "\n".join(out + notes)


def bench_workload(name: str, root: Path, args: argparse.Namespace, peer) -> dict:
    spec = WORKLOADS[name]
    synthetic = args.synthetic or not real_available(name)
    src_paths, kind = prepare_source(root / name, name, args.quick, synthetic)
    if synthetic and not args.synthetic:
        kind += ", because the real data under data/ are missing"
    info = describe(name, RaggedSource.load(*src_paths), kind)
    verify = spec["quick_verify"] if args.quick else spec["verify"]
    me = str(Path(__file__).resolve())
    peer_py, peer_version = peer
    published = f"loaderx {peer_version}" if peer_py else "loaderx 2.8.6"
    # (label, interpreter, backend, codec, environment, label of the row to compare with)
    plan = [
        (label, sys.executable, b, c, env, f"{published} {c}" if b == "loaderx" else None)
        for label, b, c, env in PEER_ROWS
    ]
    plan += [(f"{published} {c}", peer_py, "loaderx", c, None, None) for c in CODECS]
    if args.rows:
        wanted = [w.strip() for w in args.rows.split(",")]
        plan = [p for p in plan if any(w in p[0] for w in wanted)]
    rows = []
    for label, python, backend, codec, env, vs_peer in plan:
        r = {"label": label, "backend": backend, "codec": codec, "vs_peer": vs_peer}
        r.update({"env": env} if env else {})
        if python is None:
            r.update(status="not run", reason=peer_version)
        rows.append(r)
    base = [me, "--seconds", str(args.seconds), "--max-batch-s", str(args.max_batch_s)]
    base += ["--verify", str(verify), "--src", *src_paths]
    try:
        for k in range(args.rounds):
            for i, (label, python, backend, codec, env, _) in enumerate(plan):
                r = rows[i]
                if r.get("status", "ok") != "ok":
                    continue  # not run, or failed / too slow in round 1
                store = root / f"{name}-{i}"
                argv = [*base, "--worker", backend, "--codec", codec, "--store", str(store)]
                argv += ["--round", str(k)] + (["--reuse"] if k else [])
                started = time.perf_counter()
                got = run_backend(python, argv, env, args.budget)
                got["wall_s"] = time.perf_counter() - started
                if k == 0:
                    r.update(got)
                r.setdefault("rounds", []).append(got)
                if got["status"] != "ok":
                    r.update(status=got["status"], reason=got["reason"])
                    make(backend, store, codec).remove()
                note = got["status"] if got["status"] != "ok" else f"{got['krec_s']:.1f} krec/s"
                print(f"  round {k + 1} {label}: {note} ({got['wall_s']:.0f} s)", file=sys.stderr)
    finally:
        for i, (_, _, backend, codec, _, _) in enumerate(plan):
            make(backend, root / f"{name}-{i}", codec).remove()
        shutil.rmtree(root / name, ignore_errors=True)
    for r in rows:
        if r.get("status") == "ok":  # the timed figures of the median round by krec/s
            ok = sorted(r["rounds"], key=lambda g: g["krec_s"])
            median = ok[len(ok) // 2]
            r.update({k: median[k] for k in ("krec_s", "gib_s", "p95_ms", "batches")})
    return {"info": info, "rows": rows}


def breakdown(args: argparse.Namespace) -> None:
    """Where the time of one loaderx gather goes (``--breakdown``): each layer of
    the call, for every codec, with LOADERX_NUM_THREADS=1 and 2."""
    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-ragged-", dir=args.dir))
    me = str(Path(__file__).resolve())
    print(f"Machine: {machine()}\nloaderx checkout: {checkout()}")
    try:
        for name in WORKLOADS:
            if args.only not in (None, name):
                continue
            synthetic = args.synthetic or not real_available(name)
            paths, kind = prepare_source(root / name, name, args.quick, synthetic)
            src = RaggedSource.load(*paths)
            rows, headers = [], []
            for codec in CODECS:
                store = make("loaderx", root / f"{name}-{codec}", codec)
                store.prepare(src)
                store.write(src)
                for threads in ("1", "2"):
                    argv = [me, "--worker", "parts", "--src", *paths]
                    argv += ["--store", str(store.path), "--seconds", str(args.seconds)]
                    r = run_backend(
                        sys.executable, argv, {"LOADERX_NUM_THREADS": threads}, args.budget
                    )
                    rows.append([codec, threads, *(f"{v:.0f}" for v in r.values())])
                    headers = ["codec", "threads", *r.keys()]
                store.remove()
            print(f"\n{name} ({kind}): {src.n:,} records, mean µs per batch of {BATCH}\n")
            print(table(headers, rows), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parts_worker(args: argparse.Namespace) -> None:
    """Times the layers of one gather: the native call alone, ``rs.gather`` (adds
    the RaggedBatch wrapper), ``rs[idx]`` (adds index dispatch), ``rs[idx]`` with
    the three ``np.from_dlpack`` (the benchmark's call) and npy-mmap packing."""
    from loaderx.zrecord import Ragged

    src = RaggedSource.load(*args.src)
    _warm_array(src.values)
    _warm_files(Path(args.store))
    rs = Ragged.open(args.store)
    native = rs._store()
    rng = np.random.default_rng(SEED)
    draw = lambda: rng.integers(0, src.n, BATCH, dtype=np.int64)  # noqa: E731

    def full(idx: np.ndarray):
        b = rs[idx]
        return np.from_dlpack(b.values), np.from_dlpack(b.cu_seqlens), np.from_dlpack(b.shapes)

    calls = {
        "native call": lambda idx: native.gather_ragged(idx, None),
        "rs.gather": rs.gather,
        "rs[idx]": rs.__getitem__,
        "+ from_dlpack": full,
        "npy-mmap": src.pack,
    }
    out = {}
    for name, call in calls.items():
        _warm_up(call, draw, args.seconds)
        lat = time_calls(call, draw, args.seconds)
        out[name] = sum(lat) / len(lat) * 1e6
    emit(out)


def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-ragged-", dir=args.dir))
    peer = peer_python(args.peer_python)
    started = time.perf_counter()
    header = {
        "machine": machine(),
        "checkout": checkout(),
        "date": datetime.date.today().isoformat(),
        "load_start": load_average(),
        "quick": args.quick,
        "seconds": args.seconds,
        "rounds": args.rounds,
    }
    print(f"Machine: {header['machine']}")
    print(f"loaderx checkout: {header['checkout']}, {header['date']}")
    print(f"Load average at start: {header['load_start']}")
    results = {"script": "bench_ragged", **header, "workloads": {}}
    try:
        for name in WORKLOADS:
            if args.only not in (None, name):
                continue
            res = bench_workload(name, root, args, peer)
            results["workloads"][name] = res
            print("\n" + render(res["info"], res["rows"]), flush=True)
            versions = sorted({r["version"] for r in res["rows"] if r.get("version")})
            print("Versions: " + ", ".join(versions), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["load_end"] = load_average()
    results["wall_s"] = time.perf_counter() - started
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nLoad average at end: {results['load_end']}; {results['wall_s']:.0f} s in all")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="0.3 s per backend, fewer records")
    ap.add_argument("--synthetic", action="store_true", help="synthetic data, not data/")
    ap.add_argument("--dir", help="where sources and stores go (default: a new temporary folder)")
    ap.add_argument("--peer-python", help="interpreter of a venv with loaderx 2.8.6")
    ap.add_argument("--only", choices=sorted(WORKLOADS), help="run one workload")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--rounds", type=int, help="interleaved timing rounds (3; --quick: 1)")
    ap.add_argument("--rows", help="only rows whose label contains one of these (comma-separated)")
    ap.add_argument("--budget", type=float, help="seconds per backend (600; --quick: 60)")
    ap.add_argument(
        "--max-batch-s", type=float, help="a slower first batch is 'too slow' (10; --quick: 2)"
    )
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="time the layers of a loaderx gather with 1 and 2 threads instead",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--src", nargs=3, help=argparse.SUPPRESS)
    for hidden in ("--store", "--codec"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--verify", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--reuse", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "parts":
        return parts_worker(args)
    if args.worker:
        return worker(args)
    args.seconds = args.seconds or (0.3 if args.quick else 2.0)
    args.budget = args.budget or (60.0 if args.quick else 600.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.max_batch_s = args.max_batch_s or (2.0 if args.quick else 10.0)
    with one_bench_at_a_time():
        if args.breakdown:
            return breakdown(args)
        run(args)


if __name__ == "__main__":
    main()
