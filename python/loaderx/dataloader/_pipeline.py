"""One loader's steps in flight: drawing and beginning them under one lock,
completing reads that wait, transforming on worker threads, delivering in step
order, and stopping at close, at interpreter exit and in a forked child."""

from __future__ import annotations

import atexit
import inspect
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeAlias, TypeVar, cast

import numpy as np
import numpy.typing as npt

from ..errors import InvalidArgumentError, LoaderxError
from ..protocols import IndexSampler, PackedSampler, Positions, PrefetchingReader
from ..zrecord._reader import StoreReader
from ._begun import Begun, Later, Parts, Step
from ._packs import PackSplit, pack_offsets, split_packs
from ._process import split_description
from ._readahead import ReadAhead
from ._rng import StepInfo
from ._stats import LoaderStats, Recorder, Report, Traffic, batch_bytes
from ._streams import Streams

B = TypeVar("B")  # what one reader's gather returns
T = TypeVar("T")  # what the consumer receives per step
Shards: TypeAlias = list[dict[str, B]]

POLL = 0.05  # seconds between checks of the closed flag while waiting


def takes_step(transform: Callable[..., object]) -> bool:
    """Whether `transform` is called with a StepInfo as well as the shards: it is
    when it has exactly two required positional parameters. A transform that can
    be called with the shards alone (one parameter, or a second one with a
    default) is called that way, as it always was."""
    try:
        sig = inspect.signature(transform)
    except (TypeError, ValueError):  # no signature to read (some builtins)
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [
        p
        for p in sig.parameters.values()
        if p.kind in positional and p.default is inspect.Parameter.empty
    ]
    if len(required) == 2:
        return True
    try:
        sig.bind(None)
    except TypeError:
        # A callable object has no __qualname__: its type's __call__ names it, not
        # its repr.
        name = getattr(transform, "__qualname__", None) or (
            f"{type(transform).__qualname__}.__call__"
        )
        raise TypeError(
            f"transform {name!r}{sig} cannot be "
            "called with the shard list alone, nor with the shard list and a StepInfo"
        ) from None
    return False


def _traffic(streams: Streams[B]) -> Traffic:
    """What sums the bytes the streams' stores fetched and read from their
    caches; each open store once, however many readers and views share it."""
    stores: dict[int, StoreReader[object]] = {}
    for readers in streams.lists:
        for r in readers:
            if isinstance(r, StoreReader) and r.url is not None:
                stores.setdefault(id(r._store()), cast("StoreReader[object]", r))  # pyright: ignore[reportPrivateUsage]
    if not stores:
        return lambda: (0, 0)
    chosen = list(stores.values())

    def total() -> tuple[int, int]:
        fetched = cached = 0
        for r in chosen:
            try:
                f, c = r.traffic()
            except (LoaderxError, ValueError):  # closed since: it moves nothing more
                continue
            fetched += f
            cached += c
        return fetched, cached

    return total


# Pipelines whose workers have started: closed and joined at interpreter exit, and
# given fresh locks in a forked child.
_STARTED: weakref.WeakSet[Pipeline[object, object]] = weakref.WeakSet()


class Pipeline(Generic[B, T]):
    """The step state and the worker threads. The threads reference this object,
    never the LoaderIterator, so dropping the iterator lets it be collected, and
    its finalizer stops them."""

    def __init__(
        self,
        streams: Streams[B],
        sampler: IndexSampler,
        transform: Callable[..., T] | None,
        workers: int,
        prefetch: int,
        seed: int,
        process: tuple[int, int],
        stats_every: float | None = None,
        on_stats: Report | None = None,
    ) -> None:
        self.streams = streams
        self.sampler = sampler
        self.transform = transform
        self.with_step = transform is not None and takes_step(transform)
        self.packed = isinstance(sampler, PackedSampler)  # split by packs, not records
        self.workers = workers
        self.prefetch = prefetch
        self.seed = seed
        self.process_index, self.process_count = process
        self.cond = threading.Condition(threading.Lock())
        self.draw = threading.Lock()  # serializes draw and gather across workers
        self.claimed = 0  # next step a worker will draw
        self.delivered = 0  # next step the consumer receives
        self.done: dict[int, Step[T]] = {}
        # Steps begun and not yet taken by a worker; only touched under `draw`.
        self.begun: deque[Begun[B]] = deque()
        # Steps whose reads a thread is waiting for; close() cancels them.
        self.completing: set[Begun[B]] = set()
        self.threads: list[threading.Thread] = []
        self.started = False
        self.closed = False
        self.failed: BaseException | None = None
        self.pid = os.getpid()
        # No transform and only local stores: the consumer begins the steps ahead
        # itself, their gathers run on the background gather thread, and no batch
        # is handed between Python threads.
        self.ahead = workers > 0 and transform is None and streams.local
        # Remote readers fetch the blocks of the steps beyond those begun.
        self.read_ahead = ReadAhead.of(streams, sampler, self.split)
        stages = ("draw", "gather") + (("transform",) if transform is not None else ())
        self.stats = Recorder(prefetch + workers if workers else 0, stages, _traffic(streams))
        self.stats.set_reports(stats_every, on_stats)

    # -- one step ---------------------------------------------------------------

    def begin(self, step: int, drawn: object) -> Begun[B]:
        """The step's shards, as batches or as reads still under way, and its
        StepInfo when the transform takes one. Everything that needs the
        sampler's buffer happens here."""
        idx: npt.NDArray[np.generic] = np.asarray(drawn)
        if idx.ndim != 1:
            raise InvalidArgumentError(
                f"the sampler returned an array of shape {idx.shape}; expected 1-D"
            )
        if idx.dtype.kind not in "iu":
            raise TypeError(f"the sampler returned {idx.dtype} positions; expected integers")
        if idx.dtype.itemsize != 8 or not idx.flags.c_contiguous:
            # Readers gather from 64-bit positions; a sampler's narrower or strided
            # positions are widened once here (the values never change).
            idx = np.ascontiguousarray(idx, np.uint64 if idx.dtype.kind == "u" else np.int64)
        b, k, n = len(idx), self.streams.width, self.process_count
        offset, stop, bounds, packs = self.split(b, self.sampler)
        # This process's contiguous slice of the global batch, a view like the
        # bindings' parts of it.
        positions = cast("Positions", idx[offset:stop])
        parts: Parts[B] = []
        streams = self.streams
        for i in range(k):
            shard: dict[str, B | Later[B]] = {}
            pos = positions[bounds[i] : bounds[i + 1]]
            for name, readers, prefetching in zip(
                streams.names, streams.lists, streams.prefetching, strict=True
            ):
                later = None
                if self.ahead:
                    later = cast("StoreReader[B]", readers[i])._begin(pos)  # pyright: ignore[reportPrivateUsage]
                elif prefetching[i]:
                    later = cast("PrefetchingReader[B]", readers[i]).prefetch(pos)
                if later is None:
                    shard[name] = readers[i].gather(pos)
                else:
                    shard[name] = Later(later)
            parts.append(shard)
        info = None
        if self.with_step:
            # A copy: the sampler overwrites its buffer at the next draw, which may
            # come before this step's transform runs.
            own = positions.copy()
            own.flags.writeable = False
            info = StepInfo(
                step,
                own,
                self.seed,
                offset=offset,
                batch_size=b,
                process_index=self.process_index,
                process_count=n,
                pack_offsets=None if packs is None else packs.offsets,
            )
        return Begun(step, parts, info)

    def split(self, b: int, sampler: IndexSampler) -> tuple[int, int, list[int], PackSplit | None]:
        """Where this process's positions lie in a drawn step of `b` positions:
        ``[offset, stop)``, binding ``i``'s from ``bounds[i]`` to ``bounds[i + 1]``
        relative to `offset`, and the pack split of a packed step. A packed
        sampler's offsets are read from `sampler` right after its draw: it
        overwrites them at the next one."""
        k, n = self.streams.width, self.process_count
        if self.packed:
            offsets = pack_offsets(cast("PackedSampler", sampler).pack_offsets, b)
            packs = split_packs(offsets, self.process_index, n, k)
            return packs.start, packs.stop, packs.bounds, packs
        if b % (n * k):
            raise InvalidArgumentError(
                f"the sampler's batch of {b} does not divide by {split_description(n, k)}"
            )
        local = b // n
        offset = self.process_index * local
        per = local // k
        return offset, offset + local, [i * per for i in range(k + 1)], None

    def completed(self, item: Begun[B]) -> Shards[B]:
        """The step's shards, once every read it began is in. close() cancels
        the reads meanwhile, and then this raises."""
        assert item.parts is not None
        if item.waits:
            with self.cond:
                if self.closed:
                    raise InvalidArgumentError("the loader is closed")
                self.completing.add(item)
        try:
            shards: Shards[B] = []
            for part in item.parts:
                shard: dict[str, B] = {}
                for name, v in part.items():
                    shard[name] = cast("Later[B]", v).wait() if isinstance(v, Later) else v
                shards.append(shard)
            return shards
        finally:
            if item.waits:
                with self.cond:
                    self.completing.discard(item)

    def finish(self, shards: Shards[B], info: StepInfo | None) -> T:
        if self.transform is None:
            return cast("T", shards)
        if info is not None:
            return self.transform(shards, info)
        return self.transform(shards)

    # Each step reads the clock as few times as its stages need: statistics must
    # cost well under 1% of a small gather.

    def draw_and_begin(self, step: int, t0: int) -> Begun[B]:
        """Draws and begins `step`; `t0` is the clock just before."""
        ra = self.read_ahead
        if ra is not None and ra.peek is None and not ra.stopped:
            ra.before_first_draw(step)
        drawn = self.sampler.next()
        t1 = time.perf_counter_ns()
        item = self.begin(step, drawn)
        item.end_ns = time.perf_counter_ns()
        item.draw_ns, item.gather_ns = t1 - t0, item.end_ns - t1
        return item

    def run(self, item: Begun[B]) -> Step[T]:
        """Completes and transforms a begun step, timing both; the step's ``end_ns``
        is the clock when it was done."""
        fetch = transform = -1
        if item.waits:
            t0 = time.perf_counter_ns()
            shards = self.completed(item)
            end = time.perf_counter_ns()
            fetch = end - t0
        else:
            shards = self.completed(item)
            end = item.end_ns
        # Counted before the transform, which may replace the batches.
        nbytes = batch_bytes(cast("list[dict[str, object]]", shards))
        value = self.finish(shards, item.info)
        if self.transform is not None:
            t1 = end
            end = time.perf_counter_ns()
            transform = end - t1
        return Step(
            value, times=(item.draw_ns, item.gather_ns, fetch, transform), nbytes=nbytes, end_ns=end
        )

    # -- worker threads -----------------------------------------------------------

    def start(self) -> None:
        self.started = True
        self.pid = os.getpid()
        _STARTED.add(cast("Pipeline[object, object]", self))
        if self.ahead:
            return  # the consumer begins the steps; the gathers run natively
        for i in range(self.workers):
            t = threading.Thread(target=self.work, name=f"loaderx-worker-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def work(self) -> None:
        limit = self.workers + self.prefetch
        while True:
            # Draw and begin under one lock, complete and transform outside it. A
            # local gather is parallel inside, so concurrent gathers would only
            # compete for the same cores, and the gather reads the sampler's
            # reused buffer without a copy before the next draw overwrites it.
            # Reads that wait (a remote store's) are begun for every step the
            # bound allows, so that their waits overlap.
            with self.draw:
                with self.cond:
                    while (
                        not self.closed
                        and not self.begun
                        and self.claimed - self.delivered >= limit
                    ):
                        self.cond.wait(POLL)
                    if self.closed or self.failed is not None:
                        return
                while True:
                    with self.cond:
                        if self.claimed - self.delivered >= limit:
                            break
                        step = self.claimed
                        self.claimed += 1
                    try:
                        item = self.draw_and_begin(step, time.perf_counter_ns())
                    except BaseException as e:  # noqa: BLE001 - delivered to the consumer
                        self.begun.append(Begun(step, error=e))
                        break
                    self.begun.append(item)
                    if not item.waits:
                        break
                if self.read_ahead is not None:
                    self.read_ahead.advance(self.claimed)
                # Rebinds `item`: no local name may keep a begun step's batches
                # alive once the consumer has dropped them.
                item = self.begun.popleft()
            result: Step[T]
            if item.error is not None:
                result = Step(error=item.error)
            else:
                try:
                    result = self.run(item)
                except BaseException as e:  # noqa: BLE001 - delivered to the consumer
                    result = Step(error=e)
            failed = result.error is not None
            with self.cond:
                if self.closed:
                    return
                self.done[item.step] = result
                self.cond.notify_all()
            # Drop this thread's references before waiting for the next claim, or a
            # batch the consumer already discarded would stay alive past the bound.
            del result, item
            if failed:
                return

    # -- consumer side ------------------------------------------------------------

    def check_process(self) -> None:
        # The worker threads and the lock states do not survive fork(): the child's
        # copy would hand out the batches already queued, then wait forever.
        if self.started and os.getpid() != self.pid:
            raise RuntimeError(
                f"this Loader's workers run in process {self.pid}, not in this forked "
                f"child (process {os.getpid()}); create the loader after the fork"
            )

    def check_open(self) -> None:
        if self.closed:
            raise InvalidArgumentError("the loader is closed")
        if self.failed is not None:
            raise RuntimeError(
                f"the loader stopped at step {self.delivered} after an error"
            ) from self.failed

    def next(self) -> T:
        self.check_process()
        self.check_open()
        called = time.perf_counter_ns()
        if self.workers == 0 or self.ahead:
            # One step at a time, so that consumers on several threads never draw
            # into the sampler's buffer while another gathers from it.
            with self.draw:
                self.check_open_drawing()
                if self.stats.first_call is None:  # once: no lock on later steps
                    with self.cond:
                        self.stats.called(called)
                        if self.ahead:
                            self.start()
                ready = 0
                try:
                    if self.ahead:
                        done, ready = self.step_ahead()
                    else:
                        item = self.draw_and_begin(self.delivered, called)
                        if self.read_ahead is not None:
                            self.read_ahead.advance(self.delivered + 1)
                        done = self.run(item)
                        del item
                except BaseException as e:
                    self.check_open_drawing()
                    self.failed = e
                    self.begun.clear()
                    raise
                self.delivered += 1
                with self.cond:
                    report = self.record(done, called, ready, done.end_ns)
        else:
            with self.cond:
                self.stats.called(called)
                if not self.started:
                    self.start()
                ready = len(self.done)
                # Read at every wake-up: another consumer thread may have taken the step.
                while self.delivered not in self.done:
                    self.check_open()
                    self.cond.wait(POLL)
                done = self.done.pop(self.delivered)
                if done.error is not None:
                    self.failed = done.error
                    self.cond.notify_all()
                    raise done.error
                self.delivered += 1
                self.cond.notify_all()
                report = self.record(done, called, ready, time.perf_counter_ns())
        if report is not None:
            # Outside the lock: the callback may take its time, or call stats().
            cast("Report", self.stats.report)(report)
        return cast("T", done.value)

    def check_open_drawing(self) -> None:
        """check_open() for the thread that holds the draw lock, which drops the
        steps begun ahead once the loader is closed."""
        if self.closed:
            self.begun.clear()
        self.check_open()

    def step_ahead(self) -> tuple[Step[T], int]:
        """The next step with no worker thread (under the draw lock), and how many
        begun steps were ready when it was asked for. Begins the steps up to
        ``workers + prefetch`` ahead of the consumer, whose gathers run in order
        on the background gather thread, then waits, with the GIL released, for
        the oldest."""
        begun = self.begun
        ready = 0
        for item in begun:  # they finish in the order begun
            if not item.ready():
                break
            ready += 1
        limit = self.workers + self.prefetch
        while self.claimed - self.delivered < limit and (not begun or begun[-1].error is None):
            step = self.claimed
            self.claimed += 1
            try:
                item = self.draw_and_begin(step, time.perf_counter_ns())
            except BaseException as e:  # noqa: BLE001 - raised at its own step
                item = Begun[B](step, error=e)
            begun.append(item)
        item = begun.popleft()
        if item.error is not None:
            raise item.error
        shards = self.completed(item)
        end = time.perf_counter_ns()
        gather = sum(v.work_ns for v in item.later)
        nbytes = batch_bytes(cast("list[dict[str, object]]", shards))
        return Step(
            cast("T", shards), times=(item.draw_ns, gather, -1, -1), nbytes=nbytes, end_ns=end
        ), ready

    def record(self, done: Step[T], called: int, ready: int, now: int) -> LoaderStats | None:
        """Counts a delivered step (under the condition lock); the report due, if any."""
        self.stats.delivered((*done.times, now - called, done.nbytes, ready), now)
        return self.stats.due(now) if self.stats.report_every is not None else None

    def stats_now(self) -> LoaderStats:
        with self.cond:
            return self.stats.stats()

    def reset_stats(self) -> None:
        with self.cond:
            self.stats.reset()

    # -- lifetime -----------------------------------------------------------------

    def close(self, join: bool = True) -> None:
        if self.read_ahead is not None:
            # Takes no Python lock: the stores stop what they fetch ahead.
            self.read_ahead.cancel()
        if not join:
            # Takes no lock: a finalizer may run on a thread that holds it. Waiting
            # threads poll the flag.
            self.closed = True
            return
        with self.cond:
            self.closed = True
            self.done.clear()
            self.cond.notify_all()
            threads = list(self.threads)
            waiting = list(self.completing)
        # A thread waiting for a remote read (a server that stopped answering
        # waits out its timeouts and retries) is released at once.
        for item in waiting:
            item.cancel()
        if self.ahead:
            # No thread to join. Gathers not started never will be; the thread
            # that holds the draw lock drops the steps it began once it sees the
            # flag, or this does now.
            for item in tuple(self.begun):
                item.cancel()
            if self.draw.acquire(blocking=False):
                try:
                    self.begun.clear()
                finally:
                    self.draw.release()
            return
        if threading.current_thread() in threads:
            # From inside a transform: joining the others could wait on a worker
            # that is itself closing and joining this one.
            return
        for t in threads:
            t.join()
        # Reads begun and never completed are dropped, which cancels their requests.
        self.begun.clear()
        with self.cond:
            self.threads = [t for t in self.threads if t.is_alive()]

    def after_fork_in_child(self) -> None:
        # A worker may have held these locks at the fork, and it does not exist here.
        self.cond = threading.Condition(threading.Lock())
        self.draw = threading.Lock()
        self.threads = []
        self.done.clear()
        self.begun.clear()


def _close_started_pipelines() -> None:
    # A worker still inside native or user code when the interpreter finalizes is
    # torn down mid-call, which aborts the process when that code is C++ (torch).
    for pipeline in list(_STARTED):
        pipeline.close()


def _reset_pipelines_in_child() -> None:
    for pipeline in list(_STARTED):
        pipeline.after_fork_in_child()


atexit.register(_close_started_pipelines)
os.register_at_fork(after_in_child=_reset_pipelines_in_child)
