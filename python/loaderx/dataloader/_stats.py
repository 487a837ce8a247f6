"""What a Loader did: each stage's time per step, the consumer's waits, how full
the queue of finished steps was, and the bytes delivered.

The hot path only appends a step's integers to a list; every few thousand steps
(and whenever statistics are read) they are folded at once into log-scale
histograms of 16 buckets per octave, so percentiles are exact to 1/16 of an
octave (about 4 %) and memory does not grow with the steps. Windows (``reset_stats()``, periodic
reports) are differences of two snapshots of the running counters."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import NamedTuple, TypeAlias, TypedDict, cast

import numpy as np
import numpy.typing as npt

from ..zrecord import DLTensor, RaggedBatch

#: Stages of a step, in the order they run. ``fetch_wait`` applies when a reader
#: reads in the background (a remote store), ``transform`` when there is one.
STAGES = ("draw", "gather", "fetch_wait", "transform")
DRAW, GATHER, FETCH_WAIT, TRANSFORM = range(len(STAGES))

_SUB = 16  # buckets per octave
_BUCKETS = 60 * _SUB  # _bucket(2**63 - 1) is the last


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
    bytes_fetched: int
    bytes_from_cache: int


Report: TypeAlias = Callable[[LoaderStats], object]
# What the loader's stores moved so far: (fetched, from the cache).
Traffic: TypeAlias = Callable[[], tuple[int, int]]


def _no_traffic() -> tuple[int, int]:
    return (0, 0)


# Columns of a pending step: the STAGES' times, the consumer's wait, the bytes,
# the finished steps ready.
_WAIT, _BYTES, _READY, _COLUMNS = len(STAGES), len(STAGES) + 1, len(STAGES) + 2, len(STAGES) + 3
# Steps kept as Python integers before they are folded into the histograms at once.
_FOLD = 4096


def _buckets(ns: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The histogram bucket of every (non-negative) duration in `ns`: the
    duration itself below 16 ns; above, ``(b - 4) * 16`` plus the four bits after
    the leading one, ``b`` being the duration's bit length (16 equal buckets per
    octave)."""
    if ns.size and int(ns.max()) >= 1 << 53:
        # Beyond 2**53 a float's exponent may round up: count the bits exactly.
        bits = np.zeros_like(ns)
        x = ns.copy()
        for shift in (32, 16, 8, 4, 2, 1):
            big = x >= (1 << shift)
            bits += big * shift
            x = np.where(big, x >> shift, x)
        bits += x > 0
    else:
        bits = np.frexp(ns.astype(np.float64))[1].astype(np.int64)  # the bit lengths
    sub = (ns >> np.maximum(bits - 5, 0)) & (_SUB - 1)
    return np.where(ns < _SUB, ns, (bits - 4) * _SUB + sub)


class _Counts:
    """Running totals since the loader started; copied to mark a window. Row i
    of the histograms is STAGES[i], the last row the consumer's wait."""

    __slots__ = ("bytes", "hists", "queue", "steps", "totals")

    def __init__(self, queue_capacity: int) -> None:
        self.steps = 0
        self.bytes = 0
        self.hists = np.zeros((len(STAGES) + 1, _BUCKETS), np.int64)
        self.totals = np.zeros(len(STAGES) + 1, np.int64)
        self.queue = np.zeros(queue_capacity + 1, np.int64)

    def copy(self) -> _Counts:
        c = _Counts.__new__(_Counts)
        c.steps, c.bytes = self.steps, self.bytes
        c.hists, c.totals, c.queue = self.hists.copy(), self.totals.copy(), self.queue.copy()
        return c


def _stage(row: int, now: _Counts, before: _Counts) -> StageStats:
    counts = now.hists[row] - before.hists[row]
    n = int(counts.sum())
    return {
        "total_s": int(now.totals[row] - before.totals[row]) / 1e9,
        "p50_s": _percentile(counts, n, 50),
        "p95_s": _percentile(counts, n, 95),
    }


def _percentile(counts: npt.NDArray[np.int64], n: int, percent: int) -> float:
    """The smallest duration at or below which `percent` % of the counts lie."""
    if n == 0:
        return 0.0
    rank = max(1, (n * percent + 99) // 100)
    bucket = int(np.searchsorted(np.cumsum(counts), rank))
    return _middle(bucket) / 1e9


class _Mark(NamedTuple):
    """Where a window begins: the counters, the clock (None before the first
    next()) and the stores' traffic then."""

    counts: _Counts
    at: int | None
    traffic: tuple[int, int]


class Recorder:
    """The counters of one Loader. Every method is called under the pipeline's
    condition lock."""

    def __init__(
        self, queue_capacity: int, stages: tuple[str, ...], traffic: Traffic = _no_traffic
    ) -> None:
        self.capacity = queue_capacity
        self.traffic = traffic
        # Reported always, in STAGES order; another stage once a step has had it
        # (fetch_wait: a reader that reads in the background had to be waited for).
        self.present = [name in stages for name in STAGES]
        self.counts = _Counts(queue_capacity)
        self.pending: list[int] = []  # _COLUMNS integers per step not yet folded
        self.first_call: int | None = None  # perf_counter_ns of the first next()
        self.first_batch: int | None = None
        # The window stats() reports, and the period the next report covers.
        self.window = self.last_report = _Mark(self.counts.copy(), None, traffic())
        self.report_every: int | None = None
        self.report: Report | None = None

    def set_reports(self, every_s: float | None, report: Report | None) -> None:
        if every_s is None:
            return
        self.report_every = int(every_s * 1e9)
        self.report = report if report is not None else print_summary

    def called(self, now: int) -> None:
        """The consumer entered next()."""
        if self.first_call is None:
            self.first_call = now
            self.window = self.window._replace(at=now)
            self.last_report = self.last_report._replace(at=now)

    def delivered(self, step: tuple[int, ...], now: int) -> None:
        """One step reached the consumer: its STAGES' times (-1 for a stage it
        did not have), how long the consumer waited, its bytes and how many
        finished steps were ready when the consumer asked (0 with no workers).
        Kept as integers here; the histograms take them in bulk."""
        self.pending.extend(step)
        if self.first_batch is None:
            self.first_batch = now
        if len(self.pending) >= _FOLD * _COLUMNS:
            self._fold()

    def _fold(self) -> None:
        if not self.pending:
            return
        steps = np.array(self.pending, np.int64).reshape(-1, _COLUMNS)
        self.pending.clear()
        c = self.counts
        c.steps += len(steps)
        for row in range(_WAIT + 1):
            col = steps[:, row]
            col = col[col >= 0]
            if col.size:
                c.hists[row] += np.bincount(_buckets(col), minlength=_BUCKETS)
                c.totals[row] += col.sum()
                if row < _WAIT:
                    self.present[row] = True
        c.bytes += int(steps[:, _BYTES].sum())
        ready = np.minimum(steps[:, _READY], self.capacity)
        c.queue += np.bincount(ready, minlength=self.capacity + 1)

    def reset(self) -> None:
        self._fold()
        at = time.perf_counter_ns() if self.first_call is not None else None
        self.window = _Mark(self.counts.copy(), at, self.traffic())

    def stats(self) -> LoaderStats:
        self._fold()
        return self._since(self.window, self.traffic())

    def due(self, now: int) -> LoaderStats | None:
        """The report of the period just ended, when one is due; the caller calls
        ``self.report`` with it outside the lock."""
        at = self.last_report.at
        if self.report_every is None or at is None or now - at < self.report_every:
            return None
        self._fold()
        moved = self.traffic()
        out = self._since(self.last_report, moved)
        self.last_report = _Mark(self.counts.copy(), now, moved)
        return out

    def _since(self, mark: _Mark, moved: tuple[int, int]) -> LoaderStats:
        """The statistics from `mark` until now, `moved` being the traffic now."""
        c, before = self.counts, mark.counts
        fetched, cached = moved
        elapsed = 0 if mark.at is None else time.perf_counter_ns() - mark.at
        wait_ns = int(c.totals[_WAIT] - before.totals[_WAIT])
        queue = c.queue - before.queue
        seen = int(queue.sum())
        first = None
        if self.first_call is not None and self.first_batch is not None:
            first = (self.first_batch - self.first_call) / 1e9
        stages: dict[str, StageStats] = {
            name: _stage(row, c, before) for row, name in enumerate(STAGES) if self.present[row]
        }
        nonzero = np.flatnonzero(queue)
        return {
            "steps": c.steps - before.steps,
            "elapsed_s": elapsed / 1e9,
            "time_to_first_batch_s": first,
            "input_bound": min(1.0, wait_ns / elapsed) if elapsed > 0 else 0.0,
            "wait": _stage(_WAIT, c, before),
            "stages": stages,
            "queue": {
                "capacity": self.capacity,
                "mean": float(queue @ np.arange(len(queue))) / seen if seen else 0.0,
                "max": int(nonzero[-1]) if nonzero.size else 0,
                "empty": int(queue[0]) / seen if seen else 0.0,
            },
            "bytes_gathered": c.bytes - before.bytes,
            "bytes_fetched": fetched - mark.traffic[0],
            "bytes_from_cache": cached - mark.traffic[1],
        }


def batch_bytes(shards: list[dict[str, object]]) -> int:
    """The payload bytes of a step's batches: a DLTensor's ``nbytes``, a
    RaggedBatch's values'; a custom reader's batch with an int ``nbytes`` counts
    that, anything else 0."""
    total = 0
    for shard in shards:
        for v in shard.values():
            kind = type(v)
            if kind is DLTensor:
                total += cast("DLTensor", v).nbytes
            elif kind is RaggedBatch:
                total += cast("RaggedBatch", v).values.nbytes
            else:
                n = getattr(v, "nbytes", None)
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
    remote = ""
    if stats["bytes_fetched"] or stats["bytes_from_cache"]:
        remote = (
            f", {_size(stats['bytes_fetched'])} fetched, "
            f"{_size(stats['bytes_from_cache'])} from the cache"
        )
    return (
        f"input-bound {stats['input_bound']:.0%}: {steps} steps, {rate}; "
        f"p50 {stages}; wait {_duration(stats['wait']['p50_s'])} p50; "
        f"queue {q['mean']:.2g} of {q['capacity']}; {_size(stats['bytes_gathered'])} gathered"
        + remote
    )


def print_summary(stats: LoaderStats) -> None:
    """The default periodic report: ``format_stats`` on standard error."""
    print(f"loaderx: {format_stats(stats)}", file=sys.stderr, flush=True)
