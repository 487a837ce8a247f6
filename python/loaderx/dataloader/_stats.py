"""What a Loader did: each stage's time per step, the consumer's waits, how full
the queue of finished steps was, and the bytes delivered.

Steps, bytes and the consumer's total time in ``next()`` (the input-bound
fraction) are counted at every step. Stage times, the percentiles of the waits
and queue occupancy are measured on a sample of steps chosen so that measuring
costs about a quarter of a percent of the step time: every step for the first
1024 steps and while steps take longer than about a millisecond, and down to one
in 64 when they take tens of microseconds. Which steps are sampled is a fixed
pseudo-random function of the step number, so no training loop's period can
line up with it, and each sampled step counts for the steps it stands for
(totals are unbiased estimates). The hot path only appends a sampled step's
integers to a list; every few thousand of them (and whenever statistics are
read) they are folded at once into log-scale histograms of 16 buckets per
octave, so percentiles are exact to 1/16 of an octave (about 4 %) and memory
does not grow with the steps. Windows (``reset_stats()``, periodic reports) are
differences of two snapshots of the running counters."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import NamedTuple, TypeAlias, TypedDict, cast

import numpy as np
import numpy.typing as npt

from .. import _native
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


# Columns of a sampled step: the STAGES' times and the steps they stand for
# (chosen when the step was drawn), then the consumer's wait, the finished steps
# ready when it asked, and the steps those stand for (chosen at delivery).
_RUN_WEIGHT = len(STAGES)
_WAIT, _READY, _DELIVER_WEIGHT = _RUN_WEIGHT + 1, _RUN_WEIGHT + 2, _RUN_WEIGHT + 3
_COLUMNS = _RUN_WEIGHT + 4
_WAIT_ROW = len(STAGES)  # the histogram row and total of the consumer's wait
# Sampled steps kept as Python integers before they are folded into the histograms.
_FOLD = 4096

#: Step ``s`` is sampled when ``SAMPLE[s & SAMPLE_MASK] < threshold``: each value
#: 0..255 appears 16 times, in an order fixed by a seeded shuffle, so a
#: threshold of t samples exactly t of every 256 steps (of each 4096) with no
#: period shorter than 4096.
SAMPLE: bytes = bytes(np.random.default_rng(0x5EED).permutation(np.arange(4096) % 256).tolist())
SAMPLE_MASK = len(SAMPLE) - 1
EVERY_STEP = 256  # the threshold that samples every step
_FEWEST = 4  # the lowest threshold: one step in 64
_WARMUP = 1024  # deliveries, all sampled, before the rate adapts
_ADAPT = 16  # sampled deliveries between two settings of the rate
#: What measuring one sampled step costs (clock reads, the queue count, the
#: record), in nanoseconds: ``scripts/bench_handoff.py`` measures it.
SAMPLED_COST_NS = 3_000
_SHARE = 0.0025  # of the step time, spent measuring


def _threshold(period_ns: float) -> int:
    """The highest threshold (a power of two) at which sampled steps cost at
    most _SHARE of steps of `period_ns`."""
    t = EVERY_STEP
    while t > _FEWEST and SAMPLED_COST_NS * t > _SHARE * EVERY_STEP * period_ns:
        t >>= 1
    return t


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

    __slots__ = ("hists", "queue", "totals")

    def __init__(self, queue_capacity: int) -> None:
        self.hists = np.zeros((len(STAGES) + 1, _BUCKETS), np.int64)
        self.totals = np.zeros(len(STAGES) + 1, np.int64)
        self.queue = np.zeros(queue_capacity + 1, np.int64)

    def copy(self) -> _Counts:
        c = _Counts.__new__(_Counts)
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
    """Where a window begins: the counters, the steps and bytes delivered, the
    clock (None before the first next()) and the stores' traffic then."""

    counts: _Counts
    steps: int
    bytes: int
    waited: int
    at: int | None
    traffic: tuple[int, int]


class Recorder:
    """The counters of one Loader. Every method is called under the pipeline's
    condition lock or by the one thread that draws; the pipeline reads
    ``threshold`` and ``weight`` to decide which steps it measures (a step is
    sampled when ``SAMPLE[step & SAMPLE_MASK] < threshold`` and then stands for
    ``weight`` steps)."""

    def __init__(
        self,
        queue_capacity: int,
        stages: tuple[str, ...],
        traffic: Traffic = _no_traffic,
        tally: _native.Tally | None = None,
    ) -> None:
        self.capacity = queue_capacity
        self.traffic = traffic
        # Bytes counted by the gathers themselves; without it the pipeline adds
        # each step's to `bytes`.
        self.tally = tally
        self.bytes = 0
        # The consumer's time in next(), every step's: the input-bound fraction
        # is not estimated.
        self.waited = 0
        self.threshold, self.weight = EVERY_STEP, 1
        # Reported always, in STAGES order; another stage once a step has had it
        # (fetch_wait: a reader that reads in the background had to be waited for).
        self.present = [name in stages for name in STAGES]
        self.counts = _Counts(queue_capacity)
        self.pending: list[int] = []  # _COLUMNS integers per sampled step not yet folded
        self.first_call: int | None = None  # perf_counter_ns of the first next()
        self.first_step = 0  # the step the first next() delivered (a resumed loader's)
        self.first_batch: int | None = None
        self.sampled = 0  # deliveries sampled, for the warm-up
        self.last: tuple[int, int] | None = None  # (step, clock) of the last one
        # The window stats() reports, and the period the next report covers.
        self.window = self.last_report = self._mark(0, None)
        self.report_every: int | None = None
        self.report: Report | None = None

    def set_reports(self, every_s: float | None, report: Report | None) -> None:
        if every_s is None:
            return
        self.report_every = int(every_s * 1e9)
        self.report = report if report is not None else print_summary

    def _mark(self, steps: int, at: int | None, moved: tuple[int, int] | None = None) -> _Mark:
        """The running counters now, `moved` being the traffic (read when None)."""
        moved = self.traffic() if moved is None else moved
        return _Mark(self.counts.copy(), steps, self._bytes(), self.waited, at, moved)

    def _bytes(self) -> int:
        return self.bytes + (self.tally.bytes if self.tally is not None else 0)

    def called(self, now: int, step: int) -> None:
        """The consumer entered next() for `step`."""
        if self.first_call is None:
            self.first_call, self.first_step = now, step
            self.window = self.window._replace(at=now)
            self.last_report = self.last_report._replace(at=now)

    def delivered(self, row: tuple[int, ...], step: int, now: int | None) -> None:
        """A sampled step reached the consumer: its STAGES' times (-1 for a stage
        it did not have) and their weight (0 when they were not measured), how
        long the consumer waited, how many finished steps were ready when it
        asked (0 with no workers) and their weight, and the clock at delivery
        (None when the delivery was not sampled). Kept as integers here; the
        histograms take them in bulk."""
        self.pending.extend(row)
        if now is not None:
            if self.first_batch is None:
                self.first_batch = now
            self.adapt(step, now)
        if len(self.pending) >= _FOLD * _COLUMNS:
            self._fold()

    def adapt(self, step: int, now: int) -> None:
        """Every _ADAPT sampled deliveries after the warm-up, sets the sampling
        rate from the step time since the last time it did."""
        self.sampled += 1
        if self.sampled % _ADAPT:
            return
        last, self.last = self.last, (step, now)
        if self.sampled <= _WARMUP or last is None or step <= last[0]:
            return
        t = _threshold((now - last[1]) / (step - last[0]))
        self.threshold, self.weight = t, EVERY_STEP // t

    def _fold(self) -> None:
        if not self.pending:
            return
        steps = np.fromiter(self.pending, np.int64, len(self.pending)).reshape(-1, _COLUMNS)
        self.pending.clear()
        c = self.counts
        for row in range(len(STAGES)):
            self._add(row, steps[:, row], steps[:, _RUN_WEIGHT])
        self._add(_WAIT_ROW, steps[:, _WAIT], steps[:, _DELIVER_WEIGHT])
        w = steps[:, _DELIVER_WEIGHT]
        ready = np.minimum(steps[w > 0, _READY], self.capacity)
        c.queue += np.bincount(ready, weights=w[w > 0], minlength=self.capacity + 1).astype(
            np.int64
        )

    def _add(self, row: int, ns: npt.NDArray[np.int64], weights: npt.NDArray[np.int64]) -> None:
        keep = (ns >= 0) & (weights > 0)
        if not keep.any():
            return
        ns, weights = ns[keep], weights[keep]
        c = self.counts
        c.hists[row] += np.bincount(_buckets(ns), weights=weights, minlength=_BUCKETS).astype(
            np.int64
        )
        c.totals[row] += int(ns @ weights)
        if row < _WAIT_ROW:
            self.present[row] = True

    def _steps(self, delivered: int) -> int:
        return delivered - self.first_step if self.first_call is not None else 0

    def reset(self, delivered: int) -> None:
        self._fold()
        at = time.perf_counter_ns() if self.first_call is not None else None
        self.window = self._mark(self._steps(delivered), at)

    def stats(self, delivered: int) -> LoaderStats:
        self._fold()
        return self._since(self.window, self._steps(delivered), self.traffic())

    def due(self, now: int, delivered: int) -> LoaderStats | None:
        """The report of the period just ended, when one is due; the caller calls
        ``self.report`` with it outside the lock."""
        at = self.last_report.at
        if self.report_every is None or at is None or now - at < self.report_every:
            return None
        self._fold()
        moved, steps = self.traffic(), self._steps(delivered)
        out = self._since(self.last_report, steps, moved)
        self.last_report = self._mark(steps, now, moved)
        return out

    def _since(self, mark: _Mark, steps: int, moved: tuple[int, int]) -> LoaderStats:
        """The statistics from `mark` until now, `steps` and `moved` being the
        steps delivered and the traffic now."""
        c, before = self.counts, mark.counts
        fetched, cached = moved
        elapsed = 0 if mark.at is None else time.perf_counter_ns() - mark.at
        wait_ns = self.waited - mark.waited
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
            "steps": steps - mark.steps,
            "elapsed_s": elapsed / 1e9,
            "time_to_first_batch_s": first,
            "input_bound": min(1.0, wait_ns / elapsed) if elapsed > 0 else 0.0,
            "wait": {**_stage(_WAIT_ROW, c, before), "total_s": wait_ns / 1e9},
            "stages": stages,
            "queue": {
                "capacity": self.capacity,
                "mean": float(queue @ np.arange(len(queue))) / seen if seen else 0.0,
                "max": int(nonzero[-1]) if nonzero.size else 0,
                "empty": int(queue[0]) / seen if seen else 0.0,
            },
            "bytes_gathered": self._bytes() - mark.bytes,
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
