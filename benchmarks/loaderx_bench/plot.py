"""Draws the benchmark plots of docs/benchmarks.md from the JSON the bench scripts write.

Usage::

    python scripts/bench_ragged.py --json data/results/bench_ragged.json
    python scripts/plot_benchmarks.py            # reads data/results/*.json, writes docs/img/

Each JSON file names its ``script`` and holds ``workloads``: a mapping from workload
name to ``{"info": {"title": ...}, "rows": [...]}``. What is drawn depends on the
fields of the rows, so a script can start writing JSON without changes here:

- rows with ``gib_s`` (gather benchmarks: ``bench_ragged.py``, ``bench_dense.py``):
  one horizontal bar chart per workload, logical GiB/s per backend and codec, each
  bar labelled with GiB/s and records/s, on a log scale when the values span more
  than 20x. Rows whose ``status`` is not ``ok`` get a text line instead of a bar, so
  a backend that was too slow or unavailable stays visible;
- rows with ``batches_s`` and ``peak_pss_mib`` (the end-to-end loader of
  ``bench.py``): loader throughput against memory, one scatter plot per workload.
  The memory is ``loader_pss_mib`` (peak PSS minus the PSS before the loader was
  built) when every row has it, else ``peak_pss_mib``; points are labelled with
  their anonymous / mapped-file / shared-memory split when the rows carry one.

A row is named by ``label`` (else ``backend`` and ``codec``). Missing input files are
skipped with a note; a file holding neither kind of row draws nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from loaderx_bench.paths import REPO

SCRIPTS = ("bench_ragged", "bench_dense", "bench")
# Bar colours: this checkout of loaderx, the published release, everyone else.
COLOURS = {"loaderx": "#1f6fb4", "published": "#8fb8de", "peer": "#9a9a9a"}


def _name(row: dict) -> str:
    if "label" in row:
        return str(row["label"])
    return " ".join(str(row[k]) for k in ("backend", "codec") if row.get(k))


def _colour(name: str) -> str:
    words = name.replace(",", " ").split()  # "loaderx, workers=2" is loaderx too
    if words[0] != "loaderx":
        return COLOURS["peer"]
    published = len(words) > 1 and words[1][0].isdigit()  # "loaderx 2.8.6 raw"
    return COLOURS["published" if published else "loaderx"]


def _footer(result: dict) -> str:
    bits = [result.get("machine", ""), result.get("date", ""), result.get("checkout", "")]
    return " | ".join(b for b in bits if b)


def _title(script: str, workload: str, info: dict) -> str:
    """The workload's title up to its first ';' (the rest is in the docs), wrapped."""
    title = str(info.get("title", workload)).split(";")[0]
    return textwrap.fill(f"{script}: {title}", 95)


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _save(plt, fig, ax, title: str, result: dict, path: Path, footer_room: float) -> Path:
    """Titles the plot, footers it with the run's machine, date and checkout, and
    writes it to `path`."""
    ax.set_title(title, fontsize=9)
    fig.text(0.01, 0.005, _footer(result), fontsize=6, va="bottom")
    fig.tight_layout(rect=(0, footer_room, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_gather(plt, script: str, workload: str, data: dict, result: dict, out: Path) -> Path:
    """Bars in the order of the rows; a row that was not measured keeps its place
    with its status and reason written where the bar would be."""
    rows = data["rows"]
    measured = [r for r in rows if r.get("status", "ok") == "ok" and r.get("gib_s")]
    values = [float(r["gib_s"]) for r in measured]
    lo, hi = min(values), max(values)
    log = hi / lo > 20
    fig, ax = plt.subplots(figsize=(9, 1.3 + 0.3 * len(rows)))
    ypos = list(range(len(rows)))[::-1]
    for y, r in zip(ypos, rows, strict=True):
        name = _name(r)
        if r in measured:
            ax.barh(y, r["gib_s"], color=_colour(name), height=0.7)
            text = f" {_num(r['gib_s'])} GiB/s"
            if r.get("krec_s"):
                text += f", {_num(r['krec_s'])} krec/s"
            ax.text(r["gib_s"], y, text, va="center", fontsize=7)
        else:
            reason = f"{r.get('status')}: {r.get('reason', '')}"
            ax.text(lo / 1.5 if log else 0, y, " " + reason[:90], va="center", fontsize=7,
                    style="italic", color="#a33")  # fmt: skip
    ax.set_yticks(ypos, [_name(r) for r in rows], fontsize=8)
    if log:
        ax.set_xscale("log")
        ax.set_xlim(lo / 1.5, hi * 8)
    else:
        ax.set_xlim(0, hi * 1.4)
    ax.set_xlabel("logical gather throughput, GiB/s" + (" (log scale)" if log else ""))
    ax.grid(axis="x", alpha=0.3, which="both")
    title = _title(script, workload, data.get("info", {}))
    return _save(plt, fig, ax, title, result, out / f"{script}-{workload}.png", 0.02)


def plot_loader(plt, script: str, workload: str, data: dict, result: dict, out: Path) -> Path:
    rows = [r for r in data["rows"] if r.get("batches_s") and r.get("peak_pss_mib")]
    # Peak PSS includes whatever the process had imported (torch maps a lot, a venv
    # without torch far less), so the loader's own share is the fair axis.
    own = all(r.get("loader_pss_mib") is not None for r in rows)
    key = "loader_pss_mib" if own else "peak_pss_mib"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        name = _name(r)
        text = name
        parts = [r.get(f"loader_{k}_mib") for k in ("anon", "file", "shmem")]
        if own and None not in parts:
            split = zip(parts, ("anon", "file", "shm"), strict=True)
            text += "\n" + " + ".join(f"{v:.0f} {k}" for v, k in split) + " MiB"
        ax.scatter(r[key], r["batches_s"], color=_colour(name), s=40)
        ax.annotate(text, (r[key], r["batches_s"]), fontsize=7, xytext=(4, 4),
                    textcoords="offset points")  # fmt: skip
    ax.set_yscale("log")
    speeds = [r["batches_s"] for r in rows]
    ax.set_ylim(min(speeds) / 1.5, max(speeds) * 2.5)  # room for the labels above points
    ax.set_xlim(left=0, right=max(r[key] for r in rows) * 1.35 + 1)
    if own:
        ax.set_xlabel("loader PSS (peak minus before the loader), MiB")
    else:
        ax.set_xlabel("peak PSS of the process tree, MiB")
    ax.set_ylabel("batches/s (log scale)")
    ax.grid(alpha=0.3, which="both")
    title = _title(script, workload, data.get("info", {}))
    return _save(plt, fig, ax, title, result, out / f"{script}-{workload}-loader.png", 0.03)


def plot_file(plt, path: Path, out: Path) -> list[Path]:
    result = json.loads(path.read_text())
    script = result.get("script", path.stem)
    made = []
    for workload, data in result.get("workloads", {}).items():
        rows = data.get("rows", [])
        if any(r.get("gib_s") for r in rows):
            made.append(plot_gather(plt, script, workload, data, result, out))
        if any("batches_s" in r for r in rows):
            made.append(plot_loader(plt, script, workload, data, result, out))
    return made


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="JSON results (default: data/results/<script>.json)")
    ap.add_argument("--out", default=str(REPO / "docs" / "img"), help="where the PNGs go")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = [Path(f) for f in args.files] or [
        REPO / "data" / "results" / f"{s}.json" for s in SCRIPTS
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        if not f.exists():
            print(f"{f}: not found, skipped", file=sys.stderr)
            continue
        made = plot_file(plt, f, out)
        for p in made:
            print(p)
        if not made:
            print(f"{f}: no rows to plot", file=sys.stderr)


if __name__ == "__main__":
    main()
