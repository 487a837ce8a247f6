"""Reporting a run: Markdown tables, numbers, and the results JSON (machine,
checkout, date, load average, then one entry per workload)."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Sequence
from pathlib import Path

from loaderx_bench.machine import checkout, load_average, machine


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table: first column left-aligned, the others right-aligned."""
    cells = [list(map(str, headers)), *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "| " + " | ".join([first, *rest]) + " |"

    rule = [":" + "-" * (widths[0] + 1)] + ["-" * (w + 1) + ":" for w in widths[1:]]
    return "\n".join([line(cells[0]), "|" + "|".join(rule) + "|", *map(line, cells[1:])])


def fmt_num(x: float) -> str:
    """Two or three significant digits, never rounding a small value to 0."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def start_results(script: str, **settings) -> dict:
    """The results of one run of `script`: machine, checkout, date, load average and
    `settings`, with an empty ``workloads`` mapping; prints the first three."""
    results = {
        "script": script,
        "machine": machine(),
        "checkout": checkout(),
        "date": datetime.date.today().isoformat(),
        "load_start": load_average(),
        **settings,
        "workloads": {},
    }
    print(f"Machine: {results['machine']}")
    print(f"loaderx checkout: {results['checkout']}, {results['date']}")
    print(f"Load average at start: {results['load_start']}")
    return results


def write_results(path: str, results: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(results, indent=1) + "\n")


def finish_results(results: dict, started: float, json_path: str | None) -> None:
    """Records the closing load average and wall time, writes `json_path` if given
    and prints the closing line."""
    results["load_end"] = load_average()
    results["wall_s"] = time.perf_counter() - started
    if json_path:
        write_results(json_path, results)
    print(f"\nLoad average at end: {results['load_end']}; {results['wall_s']:.0f} s in all")
