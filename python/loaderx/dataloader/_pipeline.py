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

from .. import _native
from ..errors import InvalidArgumentError, LoaderxError
from ..protocols import IndexSampler, PackedSampler, Positions, PrefetchingReader
from ..zrecord._reader import StoreReader
from ._begun import Begun, Later, Parts, Step, Times
from ._packs import PackSplit, pack_offsets, split_packs
from ._process import split_description
from ._readahead import ReadAhead
from ._rng import StepInfo
from ._stats import SAMPLE, SAMPLE_MASK, LoaderStats, Recorder, Report, Traffic, batch_bytes
from ._streams import Streams

B = TypeVar("B")  # what one reader's gather returns
T = TypeVar("T")  # what the consumer receives per step
Shards: TypeAlias = list[dict[str, B]]

POLL = 0.05  # seconds between checks of the closed flag while waiting
clock = time.perf_counter_ns

# How a binding's reader is read: a store's gather begun (on the background
# gather thread, or a remote store's requests sent), a local store's gather
# made at once, another reader's prefetch, another reader's gather.
BEGIN, GATHER_STORE, PREFETCH, GATHER = range(4)


def read_kind(reader: object, ahead: bool) -> int:
    if isinstance(reader, StoreReader):
        store = cast("StoreReader[object]", reader)
        return BEGIN if ahead or store.url is not None else GATHER_STORE
    return PREFETCH if isinstance(reader, PrefetchingReader) else GATHER


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
        # The condition's lock, taken bare where nothing waits or is notified:
        # entering the condition costs several times more.
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
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
        # What the on_stats callback raised at the last call, for the next.
        self.report_error: Exception | None = None
        self.pid = os.getpid()
        # No transform and only stores' readers: the consumer begins the steps
        # ahead itself and no batch is handed between Python threads. A local
        # store's gathers, and a remote store's whose blocks are in memory, run
        # on the background gather thread; a remote store's other gathers send
        # their requests, and decode when the consumer takes the step.
        self.ahead = workers > 0 and transform is None and streams.stores_only
        # Steps begun ahead whose reads wait on object storage: the consumer's
        # wait for them is the fetch_wait stage.
        self.remote_ahead = self.ahead and any(
            cast("StoreReader[object]", r).url is not None for rs in streams.lists for r in rs
        )
        # Remote readers fetch the blocks of the steps beyond those begun.
        self.read_ahead = ReadAhead.of(streams, sampler, self.split)
        self.kinds = [[read_kind(r, self.ahead) for r in readers] for readers in streams.lists]
        # The stores' gathers count the payload bytes themselves when every
        # reader is a store's and a step is gathered as it is delivered (worker
        # threads gather steps the consumer has not received yet).
        stores = all(k in (BEGIN, GATHER_STORE) for kinds in self.kinds for k in kinds)
        self.tally = _native.Tally() if stores and (workers == 0 or self.ahead) else None
        stages = ("draw", "gather") + (("transform",) if transform is not None else ())
        capacity = prefetch + workers if workers else 0
        self.stats = Recorder(capacity, stages, _traffic(streams), self.tally)
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
        names, lists, tally = self.streams.names, self.streams.lists, self.tally
        for i in range(k):
            shard: dict[str, B | Later[B]] = {}
            pos = positions[bounds[i] : bounds[i + 1]]
            for name, readers, kinds in zip(names, lists, self.kinds, strict=True):
                r, kind = readers[i], kinds[i]
                if kind == BEGIN:
                    store = cast("StoreReader[B]", r)
                    shard[name] = Later(store._begin(pos, tally))  # pyright: ignore[reportPrivateUsage]
                elif kind == GATHER_STORE:
                    store = cast("StoreReader[B]", r)
                    shard[name] = store._gather_counted(pos, tally)  # pyright: ignore[reportPrivateUsage]
                else:
                    later = (
                        cast("PrefetchingReader[B]", r).prefetch(pos) if kind == PREFETCH else None
                    )
                    shard[name] = r.gather(pos) if later is None else Later(later)
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

    # Only sampled steps time their stages (see _stats): statistics must cost
    # well under 1% of a small gather.

    def sampled(self, step: int) -> int:
        """The steps `step` stands for when it is sampled, else 0."""
        rec = self.stats
        return rec.weight if SAMPLE[step & SAMPLE_MASK] < rec.threshold else 0

    def draw_and_begin(self, step: int, weight: int) -> Begun[B]:
        """Draws and begins `step`, timing both when `weight` (the steps it
        stands for) is not 0."""
        ra = self.read_ahead
        if ra is not None and ra.peek is None and not ra.stopped:
            ra.before_first_draw(step)
        if not weight:
            return self.begin(step, self.sampler.next())
        t0 = clock()
        drawn = self.sampler.next()
        t1 = clock()
        item = self.begin(step, drawn)
        item.end_ns = clock()
        item.draw_ns, item.gather_ns, item.weight = t1 - t0, item.end_ns - t1, weight
        return item

    def run(self, item: Begun[B]) -> Step[T]:
        """Completes and transforms a begun step, timing both when it is sampled."""
        fetch = transform = -1
        if item.waits and item.weight:
            t0 = clock()
            shards = self.completed(item)
            end = clock()
            fetch = end - t0
        else:
            shards = self.completed(item)
            end = item.end_ns
        # Counted before the transform, which may replace the batches.
        nbytes = (
            0 if self.tally is not None else batch_bytes(cast("list[dict[str, object]]", shards))
        )
        value = self.finish(shards, item.info)
        if self.transform is not None and item.weight:
            t1 = end
            end = clock()
            transform = end - t1
        times = (item.draw_ns, item.gather_ns, fetch, transform)
        return Step(value, times=times, nbytes=nbytes, weight=item.weight)

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
                        item = self.draw_and_begin(step, self.sampled(step))
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
        failed_report = self.report_error
        if failed_report is not None:
            self.report_error = None
            raise failed_report
        rec = self.stats
        report = None
        if self.workers == 0 or self.ahead:
            # One step at a time, so that consumers on several threads never draw
            # into the sampler's buffer while another gathers from it.
            with self.draw:
                self.check_open_drawing()
                called = clock()
                step = self.delivered
                # One decision per call: whether this delivery is sampled, and the
                # step drawn in this call with it.
                weight = rec.weight if SAMPLE[step & SAMPLE_MASK] < rec.threshold else 0
                if rec.first_call is None:  # once: no lock on later steps
                    with self.cond:
                        rec.called(called, step)
                        if self.ahead:
                            self.start()
                ready, done, item = 0, None, None
                try:
                    if self.ahead:
                        value, item, ready = self.step_ahead(weight)
                    else:
                        begun = self.draw_and_begin(step, weight)
                        if self.read_ahead is not None:
                            self.read_ahead.advance(step + 1)
                        done = self.run(begun)
                        del begun
                        value = done.value
                except BaseException as e:
                    # The consumer waited inside this call all the same.
                    rec.waited += clock() - called
                    self.check_open_drawing()
                    self.failed = e
                    self.begun.clear()
                    raise
                self.delivered += 1
                now = clock()
                rec.waited += now - called
                if item is not None:
                    # No Step object on this path: it would cost more than the
                    # gather. Its readers are all local stores', whose gathers
                    # count the bytes (the tally).
                    if weight or item.weight:
                        gather = -1
                        if item.weight:
                            # Beginning the gathers (a remote store's warm
                            # gather reads its blocks then), and the background
                            # thread's time on them.
                            gather = item.gather_ns
                            for v in item.later:
                                gather += v.work_ns
                        times = (item.draw_ns, gather, item.fetch_ns, -1)
                        with self.lock:
                            report = self.record(
                                times, item.weight, step, weight, now - called, ready, now
                            )
                elif done is not None:
                    rec.bytes += done.nbytes
                    if weight or done.weight:
                        with self.lock:
                            report = self.record(
                                done.times, done.weight, step, weight, now - called, ready, now
                            )
        else:
            with self.cond:
                called = clock()
                weight = self.sampled(self.delivered)
                rec.called(called, self.delivered)
                if not self.started:
                    self.start()
                ready = len(self.done)
                # Read at every wake-up: another consumer thread may have taken the step.
                while self.delivered not in self.done:
                    self.check_open()
                    self.cond.wait(POLL)
                step = self.delivered
                done = self.done.pop(step)
                if done.error is not None:
                    rec.waited += clock() - called
                    self.failed = done.error
                    self.cond.notify_all()
                    raise done.error
                self.delivered += 1
                self.cond.notify_all()
                now = clock()
                rec.waited += now - called
                rec.bytes += done.nbytes
                if weight or done.weight:
                    wait = now - called
                    report = self.record(done.times, done.weight, step, weight, wait, ready, now)
                value = done.value
        if report is not None:
            # Outside the lock: the callback may take its time, or call stats().
            try:
                cast("Report", rec.report)(report)
            except Exception as e:  # noqa: BLE001 - raised at the next call instead
                # The step is delivered (counted, and in the resume state): its
                # batch is returned, and the callback's error reaches the caller
                # at its next call, before anything is drawn.
                self.report_error = e
        return cast("T", value)

    def check_open_drawing(self) -> None:
        """check_open() for the thread that holds the draw lock, which drops the
        steps begun ahead once the loader is closed."""
        if self.closed:
            self.begun.clear()
        self.check_open()

    def step_ahead(self, weight: int) -> tuple[T, Begun[B], int]:
        """The next step with no worker thread (under the draw lock): its value,
        its begun step, and, when its delivery is sampled (`weight` > 0), how
        many begun steps were ready when it was asked for. Takes the oldest of
        the steps begun ahead of the consumer (``workers + prefetch`` of them,
        whose gathers run in order on the background gather thread), begins the
        step after the last, then waits, with the GIL released, for the one
        taken."""
        begun = self.begun
        ready = 0
        if weight and begun:
            # They finish in the order begun, each when its last gather has.
            if begun[-1].ready():
                ready = len(begun)
            else:
                for item in begun:
                    if not item.ready():
                        break
                    ready += 1
        if not begun:
            self.begin_ahead(self.delivered, weight)
        item = begun.popleft()
        if item.error is not None:
            raise item.error
        # The slot this step frees is filled now, so that the steps begun ahead
        # while the consumer works on this one are `workers + prefetch`, as many
        # as the batches the loader may hold besides the consumer's.
        self.begin_ahead(self.delivered + 1, weight)
        if item.weight and self.remote_ahead:
            t0 = clock()
            shards = self.completed(item)
            item.fetch_ns = clock() - t0
        else:
            shards = self.completed(item)
        return cast("T", shards), item, ready

    def begin_ahead(self, delivered: int, weight: int) -> None:
        """Begins the steps up to ``workers + prefetch`` ahead of `delivered`
        (the step the consumer takes next), until one fails to begin, and warms
        the steps after them."""
        begun = self.begun
        limit = self.workers + self.prefetch
        while self.claimed - delivered < limit and (not begun or begun[-1].error is None):
            step = self.claimed
            self.claimed += 1
            try:
                item = self.draw_and_begin(step, weight)
            except BaseException as e:  # noqa: BLE001 - raised at its own step
                item = Begun[B](step, error=e)
            begun.append(item)
        if self.read_ahead is not None:
            self.read_ahead.advance(self.claimed)

    def record(
        self,
        times: Times,
        run_weight: int,
        step: int,
        weight: int,
        wait: int,
        ready: int,
        now: int,
    ) -> LoaderStats | None:
        """Counts a sampled step (under the condition lock) delivered at the
        clock `now`: its run's `times` when they were measured (`run_weight` >
        0), and its delivery's `wait` and `ready` count when it is sampled
        (`weight` > 0); returns the report due, if any."""
        rec = self.stats
        if not weight:
            rec.delivered((*times, run_weight, -1, 0, 0), step, None)
            return None
        rec.delivered((*times, run_weight, wait, ready, weight), step, now)
        if rec.report_every is None:
            return None
        return rec.due(now, self.delivered)

    def stats_now(self) -> LoaderStats:
        with self.cond:
            return self.stats.stats(self.delivered)

    def reset_stats(self) -> None:
        with self.cond:
            self.stats.reset(self.delivered)

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
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
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
