"""Random gathers of the loaderx builds of several git revisions, side by side.

Every revision (default ``cb34af8 a3d6b8a HEAD``) is built once into its own venv
under ``data/builds/<commit>/`` (git-ignored): ``git archive`` of the commit, a venv
with maturin and NumPy, ``maturin build --release`` (one cargo target folder,
``data/builds/target``, shared by the revisions) and that wheel installed. Later
runs reuse the venv; ``--rebuild`` makes it again. HEAD means the commit, not
uncommitted changes, and the output says so when there are some.

Then, for every workload (Dense images, Dense tokens, Ragged images, Ragged tokens)
and codec (raw, zstd, zstd_dict), each build runs the gather worker of
``loaderx_bench.dense`` or ``loaderx_bench.ragged`` in its own venv, one process per
run: the first run writes the build's store from the source and checks that the
build's batches equal the source records exactly (repeated positions, the first and
last record) before it times anything; every run then times fresh uniform IID
batches of 256 for ``--seconds`` (2 s) after a warm-up. Runs alternate between the
builds (build 1, 2, 3 of a codec, then the next codec, and again for every round),
``--runs`` (6) of each, so that load on the machine falls on all of them alike. Each
build reads the store it wrote, in its own format version.

Printed: one table of medians of batches/s over the runs, each with its ratio to
the best build of that workload and codec, and the spread of the runs
((max - min) / median, the largest of the row's builds), the noise a ratio must be
read against. ``--json PATH`` writes every run's figures.

Needs: git, cargo (Rust) and what loaderx builds with; network access or a pip
cache for maturin and NumPy; ``loaderx_bench`` importable by the interpreter that
runs it (``bash scripts/setup_bench.sh``; this side needs only NumPy, so
``PYTHONPATH=benchmarks .venv/bin/python scripts/bench_builds.py`` does too); and
the real data under ``data/`` (``scripts/prepare_tokens.py``,
``scripts/prepare_vision.py``; ``--synthetic`` or a missing file falls back to
synthetic data, as in ``scripts/bench_dense.py`` and ``scripts/bench_ragged.py``).
On the 2-core development machine a build takes 8 to 16 minutes (less once the
shared target folder holds the dependencies) and the full table about 45 minutes
more; ``--quick`` (a prefix of the records, 0.3 s, 2 runs) about 3 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loaderx_bench import dense, ragged
from loaderx_bench.gather import BATCH, CODECS, measure_plan
from loaderx_bench.machine import load_average, machine, one_bench_at_a_time
from loaderx_bench.paths import DATA, REPO
from loaderx_bench.peers import RaggedSource
from loaderx_bench.report import fmt_num, table, write_results

DEFAULT_REVS = ("cb34af8", "a3d6b8a", "HEAD")
# (label, kind, the module whose worker gathers, its workload name)
WORKLOADS = (
    ("Dense images", "dense", "images"),
    ("Dense tokens", "dense", "tokens"),
    ("Ragged images", "ragged", "images"),
    ("Ragged tokens", "ragged", "tokens"),
)
MODULES = {"dense": dense, "ragged": ragged}


def git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def _step(what: str, cmd: list[str], log: Path, **kw) -> None:
    """Runs one build step, its output appended to `log`; a failure names the log."""
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, **kw)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}); see {log}")


def build(rev: str, cache: Path, rebuild: bool) -> tuple[str, Path]:
    """The short name of `rev` and the interpreter of a venv holding its loaderx,
    built when the cache has none (or `rebuild`)."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    short = git("rev-parse", "--short", sha)
    home = cache / sha
    python = home / "venv" / "bin" / "python"
    stamp = home / "built.json"
    if stamp.exists() and python.exists() and not rebuild:
        return short, python
    print(f"building {short} ({rev}) in {home} ...", file=sys.stderr, flush=True)
    shutil.rmtree(home, ignore_errors=True)
    src, wheels, log = home / "src", home / "wheels", home / "build.log"
    src.mkdir(parents=True)
    started = time.perf_counter()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", sha], cwd=REPO, capture_output=True, check=True
    )
    # -m: the files get the time of extraction, not the commit's. With the target
    # folder shared, an older build's outputs are newer than the commit's times,
    # and cargo would take them as up to date for another revision's sources.
    subprocess.run(["tar", "-x", "-m", "-C", str(src)], input=archive.stdout, check=True)
    _step("venv", [sys.executable, "-m", "venv", str(home / "venv")], log)
    _step("pip install", [str(python), "-m", "pip", "install", "-q", "maturin", "numpy"], log)
    env = {**os.environ, "CARGO_TARGET_DIR": str(cache / "target")}
    env.pop("VIRTUAL_ENV", None)
    maturin = [str(home / "venv" / "bin" / "maturin"), "build", "--release", "-o", str(wheels)]
    _step("maturin build", maturin, log, cwd=src, env=env)
    wheel = [str(w) for w in wheels.glob("*.whl")]
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall"]
    _step("pip install of the wheel", install + wheel, log)
    shutil.rmtree(src)
    stamp.write_text(json.dumps({"rev": rev, "commit": sha, "wheel": wheel}) + "\n")
    print(f"built {short} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return short, python


def _source(kind: str, name: str, root: Path, args: argparse.Namespace) -> tuple[list[str], str]:
    """The worker's --src arguments for a workload, and what the data are."""
    if kind == "dense":
        path, n, what = dense.prepare_source(root, name, args)
        return [str(path), str(n)], what
    synthetic = args.synthetic or not ragged.real_available(name)
    return ragged.prepare_source(root, name, args.quick, synthetic)


def _records(kind: str, src_args: list[str]) -> int:
    if kind == "dense":
        return int(src_args[1])
    return RaggedSource.load(*src_args).n


def measure(label: str, kind: str, name: str, builds, root: Path, args) -> list[dict]:
    """Every build's runs of one workload, for every codec, alternating builds."""
    work = root / f"source-{kind}-{name}"
    work.mkdir(parents=True)
    try:
        src_args, what = _source(kind, name, work, args)
        print(f"{label}: {_records(kind, src_args):,} records; data: {what}", flush=True)
        spec = MODULES[kind].WORKLOADS[name]
        verify = spec["quick_verify"] if args.quick else spec["verify"]
        plan = [
            (f"{short} {codec}", python, "loaderx", codec, None, None)
            for codec in args.codecs
            for short, python in builds
        ]
        module = MODULES[kind].__spec__.name
        rows = measure_plan(plan, module, src_args, verify, root, f"{kind}-{name}", args, "")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for row, (_, codec) in zip(rows, [(s, c) for c in args.codecs for s, _ in builds], strict=True):
        row.update(workload=label, build=row["label"].split()[0], codec=codec)
    return rows


def summarize(rows: list[dict], builds) -> str:
    """One line per workload and codec: each build's median batches/s over its runs
    and ratio to the best, and the largest spread of the runs."""
    names = [short for short, _ in builds]
    lines, notes = [], []
    groups: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["codec"]), {})[r["build"]] = r
    for (workload, codec), by in groups.items():
        rates: dict[str, list[float]] = {}
        for b, r in by.items():
            if r.get("status", "ok") != "ok":
                notes.append(f"- {workload} {codec}, {b}: {r['status']}: {r.get('reason')}")
                continue
            rates[b] = [g["krec_s"] * 1e3 / BATCH for g in r["rounds"] if g["status"] == "ok"]
        medians = {b: statistics.median(v) for b, v in rates.items() if v}
        best = max(medians.values(), default=0.0)
        spread = max(((max(v) - min(v)) / statistics.median(v) for v in rates.values()), default=0)
        cells = [
            f"{fmt_num(medians[b])} ({medians[b] / best:.2f}x)" if b in medians else "-"
            for b in names
        ]
        lines.append([f"{workload}, {codec}", *cells, f"{spread:.0%}"])
    headers = ["workload, codec", *(f"{b} batches/s" for b in names), "spread"]
    return "\n".join([table(headers, lines), *notes])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="*", default=list(DEFAULT_REVS), help="git revisions")
    ap.add_argument("--cache", type=Path, default=DATA / "builds", help="builds' folder")
    ap.add_argument("--rebuild", action="store_true", help="build again even if cached")
    ap.add_argument("--build-only", action="store_true", help="build, then stop")
    ap.add_argument("--only", help="workloads whose label contains one of these (comma-separated)")
    ap.add_argument("--codecs", default=",".join(CODECS), help="comma-separated codecs")
    ap.add_argument("--runs", type=int, help="runs of each build (6; --quick: 2)")
    ap.add_argument("--seconds", type=float, help="timed seconds per run (2; --quick: 0.3)")
    ap.add_argument("--quick", action="store_true", help="a prefix of the records, short runs")
    ap.add_argument("--synthetic", action="store_true", help="synthetic data, not data/")
    ap.add_argument("--dir", help="where sources and stores go (default: a new temporary folder)")
    ap.add_argument("--json", help="also write every run's results to this JSON file")
    args = ap.parse_args(argv)
    args.codecs = [c.strip() for c in args.codecs.split(",")]
    if unknown := set(args.codecs) - set(CODECS):
        ap.error(f"unknown codecs {sorted(unknown)}; choose from {', '.join(CODECS)}")
    args.rounds = args.runs or (2 if args.quick else 6)
    args.seconds = args.seconds or (0.3 if args.quick else 2.0)
    args.max_batch_s = 2.0 if args.quick else 10.0
    args.budget = 60.0 if args.quick else 600.0
    wanted = [w.strip() for w in args.only.split(",")] if args.only else None
    workloads = [w for w in WORKLOADS if wanted is None or any(x in w[0] for x in wanted)]

    args.cache.mkdir(parents=True, exist_ok=True)
    builds: list[tuple[str, Path]] = []
    revs: list[str] = []
    for rev in args.revs:
        short, python = build(rev, args.cache.resolve(), args.rebuild)
        if short in (s for s, _ in builds):
            print(f"{rev} is {short}, already listed: measured once", file=sys.stderr)
            continue
        builds.append((short, python))
        revs.append(rev)
    if args.build_only:
        return 0
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "crates", "python")
    started = time.perf_counter()
    print(f"Machine: {machine()}")
    print(f"Builds: {', '.join(f'{s} ({r})' for (s, _), r in zip(builds, revs, strict=True))}")
    if "HEAD" in revs and dirty:
        print("HEAD is the commit: uncommitted changes in crates/ or python/ are not built")
    print(f"Load average at start: {load_average()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="loaderx-bench-builds-", dir=args.dir))
    rows: list[dict] = []
    try:
        with one_bench_at_a_time():
            for label, kind, name in workloads:
                rows += measure(label, kind, name, builds, root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\nRandom IID batches of {BATCH}; median of {args.rounds} runs of {args.seconds:g} s, "
        "each in its own process, builds alternating; ratio to the best build of the row.\n"
    )
    print(summarize(rows, builds))
    wall = time.perf_counter() - started
    print(f"\nLoad average at end: {load_average()}; {wall:.0f} s in all")
    if args.json:
        results = {"machine": machine(), "revs": revs, "builds": [s for s, _ in builds]}
        results.update(runs=args.rounds, seconds=args.seconds, wall_s=wall, rows=rows)
        write_results(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
