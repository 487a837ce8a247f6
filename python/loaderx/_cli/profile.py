"""``loaderx profile``: runs a Loader over stores for some steps, prints where
each step's time went and what to change, and draws it when matplotlib is there."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ..dataloader import Loader, LoaderStats, format_stats
from ..sampler import Sampler
from ..zrecord import Dense, Ragged
from ._common import (
    FAILED,
    OK,
    READ_ERRORS,
    USAGE,
    NewCommand,
    error_line,
    non_negative,
    open_reader,
    positive,
    storage_option_arg,
)

#: A stage is called dominant when it takes at least this share of a step.
DOMINANT = 0.5
#: Below this input-bound fraction the loader keeps up with the consumer.
KEEPS_UP = 0.05
#: Points drawn per stage over the run.
POINTS = 100

MODES = {m.name.lower(): m for m in Sampler.Mode}


def advice(stats: LoaderStats, workers: int, prefetch: int, compressed: bool) -> list[str]:
    """What to change, from the statistics of a run: one line per finding."""
    steps = stats["steps"]
    if steps == 0:
        return []
    if stats["input_bound"] < KEEPS_UP:
        return [
            f"the consumer waited {stats['input_bound']:.0%} of the time: the loader keeps "
            "up, and none of its settings would make training faster"
        ]
    per_step = {k: v["total_s"] / steps for k, v in stats["stages"].items()}
    step = sum(per_step.values())
    if step <= 0:
        return []
    name, longest = max(per_step.items(), key=lambda kv: kv[1])
    share = longest / step
    if share < DOMINANT:
        return [f"no stage takes half of a step (the longest, {name}, takes {share:.0%})"]
    lead = f"{name} takes {share:.0%} of each step"
    if name == "transform":
        if workers == 0:
            return [f"{lead}: use worker threads (--workers N) so that steps transform at once"]
        return [f"{lead}: raise --workers (now {workers}) so that more steps transform at once"]
    if name == "fetch_wait":
        return [
            f"{lead} waiting for remote reads: give the stores a block cache "
            f"(cache=Cache(...)) and raise --prefetch (now {prefetch}) so that more "
            "steps' reads overlap"
        ]
    if name == "gather":
        if compressed:
            return [
                f"{lead}, mostly decoding: a store written with codec raw decodes nothing "
                "(it takes more disk), or give gathers more threads (loaderx.set_threads)"
            ]
        return [
            f"{lead}: reads are bound by the disk or the page cache; faster storage or "
            "a smaller record (a cheaper format of the data) helps"
        ]
    return [f"{lead}: the sampler's next() is slow; draw positions in bulk"]


def _load_transform(spec: str) -> Callable[..., object]:
    module, colon, name = spec.partition(":")
    if not colon or not module or not name:
        raise ValueError(f"--transform must be MODULE:FUNCTION, got {spec!r}")
    fn = getattr(importlib.import_module(module), name)
    if not callable(fn):
        raise ValueError(f"--transform {spec}: not callable")
    return fn


def _series(points: list[tuple[int, LoaderStats]]) -> dict[str, Any]:
    """Per interval between two points: each stage's mean time per step (ms) and
    the mean number of finished steps ready."""
    out: dict[str, Any] = {"step": [], "stages": {}, "queue": []}
    for (_, a), (s1, b) in zip(points, points[1:], strict=False):
        n = b["steps"] - a["steps"]
        if n <= 0:
            continue
        out["step"].append(s1)
        for k, v in b["stages"].items():
            before = a["stages"].get(k, {"total_s": 0.0})["total_s"]
            out["stages"].setdefault(k, []).append((v["total_s"] - before) / n * 1e3)
        wait = (b["wait"]["total_s"] - a["wait"]["total_s"]) / n * 1e3
        out["stages"].setdefault("consumer wait", []).append(wait)
        queued = b["queue"]["mean"] * b["steps"] - a["queue"]["mean"] * a["steps"]
        out["queue"].append(queued / n)
    return out


def draw(path: str, points: list[tuple[int, LoaderStats]], capacity: int, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = _series(points)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, values in s["stages"].items():
        top.plot(s["step"], values, label=name)
    top.set_ylabel("ms per step")
    top.set_title(title)
    top.legend(loc="upper right")
    bottom.plot(s["step"], s["queue"], label="finished steps ready")
    bottom.axhline(capacity, color="grey", linestyle="--", label=f"capacity ({capacity})")
    bottom.set_ylabel("queue")
    bottom.set_xlabel("step")
    bottom.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)  # pyright: ignore[reportUnknownMemberType]
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    options = dict(args.storage_options or [])
    names = [os.path.basename(os.path.normpath(p)) or p for p in args.paths]
    if len(set(names)) != len(names):
        print("error: two stores have the same name; give each stream its own", file=sys.stderr)
        return USAGE
    try:
        transform = _load_transform(args.transform) if args.transform else None
    except (ImportError, AttributeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE
    readers: list[Dense | Ragged] = []
    try:
        for path in args.paths:
            try:
                readers.append(open_reader(path, options if options else None))
            except READ_ERRORS as e:
                print(error_line(path, e), file=sys.stderr)
                return FAILED
        n = len(readers[0])
        sampler = Sampler(n, args.batch_size, MODES[args.mode], seed=args.seed)
        streams: dict[str, list[Dense | Ragged]] = {
            name: [r] for name, r in zip(names, readers, strict=True)
        }
        every = max(1, args.steps // POINTS)
        points: list[tuple[int, LoaderStats]] = []
        try:
            with Loader(
                streams, sampler, transform=transform, workers=args.workers, prefetch=args.prefetch
            ) as loader:
                for step in range(args.steps):
                    loader.next()
                    if args.step_time:
                        time.sleep(args.step_time)
                    if step == 0 or (step + 1) % every == 0:
                        points.append((step + 1, loader.stats()))
                stats = loader.stats()
        except READ_ERRORS as e:
            print(f"error: {e}", file=sys.stderr)
            return FAILED
        compressed = any(r.codec != "raw" for r in readers)
    finally:
        for r in readers:
            r.close()
    found = advice(stats, args.workers, args.prefetch, compressed)
    if args.json:
        print(json.dumps({"stats": stats, "advice": found}, indent=2))
    else:
        print(format_stats(stats))
        for line in found:
            print(f"advice: {line}")
    if args.png:
        try:
            draw(args.png, points, stats["queue"]["capacity"], ", ".join(names))
        except ImportError:
            print("error: --png needs matplotlib (pip install matplotlib)", file=sys.stderr)
            return FAILED
        if not args.json:
            print(f"wrote {args.png}")
    return OK


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a duration")
    return v


def add(new: NewCommand) -> None:
    about = "run a Loader over stores and show where each step's time goes"
    p = new("profile", about)
    p.add_argument("paths", metavar="STORE", nargs="+", help="one stream per store")
    p.add_argument("--batch-size", type=positive, default=256)
    p.add_argument("--steps", type=positive, default=200)
    p.add_argument("--mode", choices=sorted(MODES), default="iid")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=non_negative, default=4, help="worker threads (0: none)")
    p.add_argument("--prefetch", type=positive, default=4)
    p.add_argument("--transform", metavar="MODULE:FUNCTION", help="a transform to run per step")
    p.add_argument(
        "--step-time",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="how long the consumer works per step (a training step); default 0",
    )
    p.add_argument("--png", metavar="PATH", help="draw the stages and the queue (matplotlib)")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    storage_option_arg(p)
    p.set_defaults(run=run)
