"""What a Loader did: each stage's time per step, the consumer's waits, how full
the queue of finished steps was, and the bytes delivered.

The hot path only adds integers: each duration goes to a log-scale histogram of
16 buckets per octave, so percentiles are exact to 1/16 of an octave (about 4 %)
and memory does not grow with the steps. Windows (``reset_stats()``, periodic
reports) are differences of two snapshots of the running counters."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeAlias, TypedDict

#: Stages of a step, in the order they run. ``fetch_wait`` applies when a reader
#: reads in the background (a remote store), ``transform`` when there is one.
STAGES = ("draw", "gather", "fetch_wait", "transform")
DRAW, GATHER, FETCH_WAIT, TRANSFORM = range(len(STAGES))

_SUB = 16  # buckets per octave
_BUCKETS = 60 * _SUB  # _bucket(2**63 - 1) is the last


def _bucket(ns: int) -> int:
    """The histogram bucket of a duration: exact below 16 ns, then 16 buckets of
    equal width per octave."""
    if ns < _SUB:
        return max(ns, 0)
    bits = ns.bit_length()
    return (bits - 4) * _SUB + ((ns >> (bits - 5)) & (_SUB - 1))


def _middle(bucket: int) -> float:
    """The middle of a bucket's range, in nanoseconds."""
    octave, j = divmod(bucket, _SUB)
    if octave <= 1:
        return float(bucket)
    width = 1 << (octave - 1)
    return ((_SUB + j) << (octave - 1)) + width / 2


class StageStats(TypedDict):
    """One stage's time per step over the window."""

    total_s: float
    p50_s: float
    p95_s: float


class QueueStats(TypedDict):
    """The finished steps waiting for the consumer, seen at each ``next()``."""

    capacity: int
    mean: float
    max: int
    empty: float


class LoaderStats(TypedDict):
    """What ``Loader.stats()`` returns: plain JSON data over one window."""

    steps: int
    elapsed_s: float
    time_to_first_batch_s: float | None
    input_bound: float
    wait: StageStats
    stages: dict[str, StageStats]
    queue: QueueStats
    bytes_gathered: int


Report: TypeAlias = Callable[[LoaderStats], object]


class _Counts:
    """Running totals since the loader started; copied to mark a window."""

    __slots__ = ("bytes", "hists", "queue", "steps", "totals", "wait", "wait_total")

    def __init__(self, queue_capacity: int) -> None:
        self.steps = 0
        self.bytes = 0
        self.hists = [[0] * _BUCKETS for _ in STAGES]
        self.totals = [0] * len(STAGES)
        self.wait = [0] * _BUCKETS
        self.wait_total = 0
        self.queue = [0] * (queue_capacity + 1)

    def copy(self) -> _Counts:
        c = _Counts.__new__(_Counts)
        c.steps, c.bytes, c.wait_total = self.steps, self.bytes, self.wait_total
        c.hists = [list(h) for h in self.hists]
        c.totals = list(self.totals)
        c.wait = list(self.wait)
        c.queue = list(self.queue)
        return c


def _stage(hist: list[int], before: list[int], total_ns: int) -> StageStats:
    counts = [a - b for a, b in zip(hist, before, strict=True)]
    n = sum(counts)
    return {
        "total_s": total_ns / 1e9,
        "p50_s": _percentile(counts, n, 50),
        "p95_s": _percentile(counts, n, 95),
    }


def _percentile(counts: list[int], n: int, percent: int) -> float:
    """The smallest duration at or below which `percent` % of the counts lie."""
    if n == 0:
        return 0.0
    rank = max(1, (n * percent + 99) // 100)
    seen = 0
    for bucket, c in enumerate(counts):
        seen += c
        if seen >= rank:
            return _middle(bucket) / 1e9
    raise AssertionError("unreachable: the counts sum to n")


class Recorder:
    """The counters of one Loader. Every method is called under the pipeline's
    condition lock, except where it says otherwise."""

    def __init__(self, queue_capacity: int, stages: tuple[str, ...]) -> None:
        self.capacity = queue_capacity
        # Reported always, in STAGES order; another stage once a step has had it
        # (fetch_wait: a reader that reads in the background had to be waited for).
        self.present = [name in stages for name in STAGES]
        self.counts = _Counts(queue_capacity)
        self.first_call: int | None = None  # perf_counter_ns of the first next()
        self.first_batch: int | None = None
        self.window = self.counts.copy()
        self.window_start: int | None = None
        self.report_every: int | None = None
        self.report: Report | None = None
        self.last_report = self.counts.copy()
        self.last_report_at: int | None = None

    def set_reports(self, every_s: float | None, report: Report | None) -> None:
        if every_s is None:
            return
        self.report_every = int(every_s * 1e9)
        self.report = report if report is not None else print_summary

    def called(self, now: int) -> None:
        """The consumer entered next()."""
        if self.first_call is None:
            self.first_call = self.window_start = self.last_report_at = now

    def delivered(self, step_ns: tuple[int, ...], nbytes: int, waited_ns: int, ready: int) -> None:
        """One step reached the consumer: its stages' times, its bytes, how long
        the consumer waited for it and how many finished steps were ready when
        the consumer asked (0 with no workers)."""
        c = self.counts
        c.steps += 1
        c.bytes += nbytes
        for i, ns in enumerate(step_ns):
            if ns >= 0:
                c.hists[i][_bucket(ns)] += 1
                c.totals[i] += ns
                self.present[i] = True
        c.wait[_bucket(waited_ns)] += 1
        c.wait_total += waited_ns
        c.queue[min(ready, self.capacity)] += 1
        if self.first_batch is None:
            self.first_batch = time.perf_counter_ns()

    def reset(self) -> None:
        self.window = self.counts.copy()
        self.window_start = time.perf_counter_ns() if self.first_call is not None else None

    def stats(self) -> LoaderStats:
        return self._since(self.window, self.window_start)

    def due(self, now: int) -> LoaderStats | None:
        """The report of the period just ended, when one is due; the caller calls
        ``self.report`` with it outside the lock."""
        if self.report_every is None or self.last_report_at is None:
            return None
        if now - self.last_report_at < self.report_every:
            return None
        out = self._since(self.last_report, self.last_report_at)
        self.last_report = self.counts.copy()
        self.last_report_at = now
        return out

    def _since(self, before: _Counts, start: int | None) -> LoaderStats:
        c = self.counts
        now = time.perf_counter_ns()
        elapsed = 0 if start is None else now - start
        wait_ns = c.wait_total - before.wait_total
        queue = [a - b for a, b in zip(c.queue, before.queue, strict=True)]
        seen = sum(queue)
        first = None
        if self.first_call is not None and self.first_batch is not None:
            first = (self.first_batch - self.first_call) / 1e9
        stages: dict[str, StageStats] = {}
        for i, name in enumerate(STAGES):
            if not self.present[i]:
                continue
            stages[name] = _stage(c.hists[i], before.hists[i], c.totals[i] - before.totals[i])
        return {
            "steps": c.steps - before.steps,
            "elapsed_s": elapsed / 1e9,
            "time_to_first_batch_s": first,
            "input_bound": min(1.0, wait_ns / elapsed) if elapsed > 0 else 0.0,
            "wait": _stage(c.wait, before.wait, wait_ns),
            "stages": stages,
            "queue": {
                "capacity": self.capacity,
                "mean": sum(k * n for k, n in enumerate(queue)) / seen if seen else 0.0,
                "max": max((k for k, n in enumerate(queue) if n), default=0),
                "empty": queue[0] / seen if seen else 0.0,
            },
            "bytes_gathered": c.bytes - before.bytes,
        }


def batch_bytes(shards: list[dict[str, object]]) -> int:
    """The payload bytes of a step's batches: a DLTensor's ``nbytes``, a
    RaggedBatch's values'; 0 for what has neither (a custom reader's batch)."""
    total = 0
    for shard in shards:
        for v in shard.values():
            n = getattr(v, "nbytes", None)
            if n is None:
                n = getattr(getattr(v, "values", None), "nbytes", None)
            if type(n) is int:
                total += n
    return total


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def format_stats(stats: LoaderStats) -> str:
    """One line for a training log, e.g. ``input-bound 3%: 1200 steps, 120/s;
    p50 draw 2.1 µs, gather 41 µs, transform 1.2 ms; wait 0.5 ms p50;
    queue 3.2 of 4; 1.25 GB gathered``."""
    steps, elapsed = stats["steps"], stats["elapsed_s"]
    rate = f"{steps / elapsed:.3g}/s" if elapsed > 0 else "-"
    stages = ", ".join(f"{k} {_duration(v['p50_s'])}" for k, v in stats["stages"].items())
    q = stats["queue"]
    return (
        f"input-bound {stats['input_bound']:.0%}: {steps} steps, {rate}; "
        f"p50 {stages}; wait {_duration(stats['wait']['p50_s'])} p50; "
        f"queue {q['mean']:.2g} of {q['capacity']}; {_size(stats['bytes_gathered'])} gathered"
    )


def print_summary(stats: LoaderStats) -> None:
    """The default periodic report: ``format_stats`` on standard error."""
    print(f"loaderx: {format_stats(stats)}", file=sys.stderr, flush=True)
