"""``Loader`` (the configuration) and ``LoaderIterator`` (its one pass: the
step state, the workers, resume)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Generic, NoReturn, TypeVar, overload

from .. import _native
from .._schema import check_int
from ..errors import InvalidArgumentError
from ..protocols import IndexSampler, PackedSampler, Reader, SeekableSampler, SizedSampler
from ._pipeline import Pipeline, Shards
from ._process import exact_int, resolve_process, split_description
from ._rng import MAX_SEED, StepInfo
from ._state import STATE_VERSION, State, as_mapping, check_depth, plain, sampler_key
from ._stats import LoaderStats
from ._streams import Streams

#: The most worker threads a Loader starts.
MAX_WORKERS: int = _native.MAX_THREADS
#: Most batches ``prefetch`` may queue: far past any jitter worth absorbing, and
#: small enough that the queue's statistics (an entry per possible length) cost
#: nothing to hold.
MAX_PREFETCH: int = 1 << 16
#: Longest ``stats_every``, in seconds (about 31 years).
MAX_STATS_EVERY: float = 1e9

B = TypeVar("B")  # what one reader's gather returns
T = TypeVar("T")  # what the consumer receives per step
R = TypeVar("R")  # B, for the constructor overload that fixes T from it


def _batch_size(sampler: IndexSampler) -> int | None:
    """The sampler's batch size when it can be known before the first draw."""
    if isinstance(sampler, SizedSampler):
        return exact_int(sampler.batch_size)
    return None


def _packs_per_step(sampler: IndexSampler) -> int | None:
    """The packs of each step when the sampler draws packs, else None; a
    packed sampler's count that is not an integer >= 1 is refused here, before
    the first draw, since the steps are split by it."""
    if not isinstance(sampler, PackedSampler):
        return None
    return check_int(sampler.packs_per_step, "the sampler's packs_per_step", 1)


def _is_sampler(sampler: object) -> bool:
    return isinstance(sampler, IndexSampler) and callable(sampler.next)


def _check_reports(every: object, on_stats: object) -> float | None:
    """``stats_every`` as seconds, checked with the callback it goes with."""
    if on_stats is not None and not callable(on_stats):
        raise TypeError(f"on_stats must be callable, got {type(on_stats).__name__}")
    if every is None:
        if on_stats is not None:
            raise InvalidArgumentError("on_stats is called every stats_every seconds; give both")
        return None
    if (
        isinstance(every, bool)
        or not isinstance(every, (int, float))
        or not math.isfinite(every)
        or every <= 0
        or every > MAX_STATS_EVERY
    ):
        raise InvalidArgumentError(
            f"stats_every must be a positive number of seconds, at most {MAX_STATS_EVERY:.0f}, "
            f"got {every!r}"
        )
    return float(every)


class LoaderIterator(Iterator[T], Generic[B, T]):
    """The state of one pass over a Loader's endless steps: the next step, the
    batches in flight and the worker threads. ``iter(loader)`` returns its
    loader's one LoaderIterator; it is not constructed directly."""

    def __init__(self, pipeline: Pipeline[B, T]) -> None:
        self._pipeline = pipeline

    def next(self) -> T:
        """The next step's result (the transform's return value, or the shard list)."""
        return self._pipeline.next()

    def __next__(self) -> T:
        return self._pipeline.next()

    def __iter__(self) -> LoaderIterator[B, T]:
        self._pipeline.check_process()
        return self

    # -- resume -------------------------------------------------------------------

    def state_dict(self) -> State:
        """A small versioned dict of JSON data: the step the loader delivers next,
        what identifies the sampler's sequence, and the streams it reads."""
        p = self._pipeline
        return {
            "version": STATE_VERSION,
            "step": p.delivered,
            "seed": p.seed,
            "sampler": sampler_key(p.sampler),
            "streams": p.streams.state(),
        }

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Resumes at ``state['step']``. Call before the first ``next()``."""
        p = self._pipeline
        given = as_mapping(state, "state must be a dict from state_dict()")
        check_depth(given, "the state")
        version = given.get("version")
        if type(version) is not int or version != STATE_VERSION:
            old = type(version) is int and version == 2
            why = " (version 2 states do not record the loader's seed)" if old else ""
            raise InvalidArgumentError(
                f"loader state version {version!r} is not supported; this loader reads "
                f"version {STATE_VERSION}{why}"
            )
        if p.started or p.delivered or p.claimed:
            raise RuntimeError("load_state_dict must be called before the first next()")
        step = check_int(given.get("step"), "state['step']", 0)
        seed = given.get("seed")
        if type(seed) is not int or seed != p.seed:
            # A two-argument transform's random generators derive from the seed, so
            # another seed would resume with other augmentations.
            raise InvalidArgumentError(
                f"the state was taken with seed {seed!r}, this loader's seed is {p.seed}"
            )
        if "streams" not in given:
            raise InvalidArgumentError(
                "the state has no 'streams'; it was not made by state_dict()"
            )
        p.streams.check(given["streams"])
        key = sampler_key(p.sampler)
        theirs = plain(given.get("sampler"), "the state's sampler")
        if theirs != key:
            raise InvalidArgumentError(
                f"the state was taken with sampler {theirs!r}, this loader's sampler is {key!r}"
            )
        if isinstance(p.sampler, SeekableSampler):
            p.sampler.seek(step)
        elif step:
            raise TypeError("resuming needs a sampler with seek(step)")
        p.delivered = p.claimed = step

    # -- statistics ---------------------------------------------------------------

    def stats(self) -> LoaderStats:
        """What the loader did since it started or since ``reset_stats()``: see
        ``Loader.stats``."""
        return self._pipeline.stats_now()

    def reset_stats(self) -> None:
        """Starts a new window of ``stats()``."""
        self._pipeline.reset_stats()

    # -- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        """Stops the workers, waits until none is running, and drops queued
        batches. Idempotent."""
        self._pipeline.close()

    @property
    def closed(self) -> bool:
        return self._pipeline.closed

    def __del__(self) -> None:
        # Only signals: a finalizer may run on any thread, even a worker's, and must
        # not wait for a transform. Interpreter exit joins what is still running.
        pipeline = getattr(self, "_pipeline", None)
        if pipeline is not None and not pipeline.closed:
            pipeline.close(join=False)

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a LoaderIterator cannot be pickled: its worker threads and batches belong to "
            "this process; save its state_dict() instead"
        )

    def __repr__(self) -> str:
        p = self._pipeline
        state = "closed" if p.closed else f"step={p.delivered}"
        return f"LoaderIterator(streams={p.streams.names}, {state})"


class Loader(Generic[B, T]):
    """Endless, step-ordered batches from aligned streams.

    ``workers=0`` draws, gathers and transforms in the caller's thread. Positive
    ``workers`` are threads: each draws and gathers a step under one lock, then
    transforms it concurrently with the others. Without a transform over local
    stores no thread is needed: ``next()`` begins the steps ahead and their
    gathers run in order on the engine's background gather thread. At most
    ``workers + prefetch`` batches are live besides those the consumer holds;
    finished batches wait in step order, so delivery order never depends on
    which worker was faster.

    A Loader has one iterator: ``iter(loader)`` returns the same LoaderIterator
    every time, and ``next(loader)``, ``state_dict()`` and ``close()`` act on it,
    so no two loops over one loader see the same step. ``close()`` returns once no
    worker runs loaderx or user code.

    ``transform(shards)`` receives each step's list of shard dicts. A transform
    with exactly two required positional parameters is called as
    ``transform(shards, step)`` with a ``StepInfo``, whose ``rng`` derives from
    ``seed`` and the step alone: random augmentation then repeats exactly with any
    number of workers and after a resume.

    ``process_index`` and ``process_count`` (both or neither) make this loader
    gather only slice ``process_index`` of ``process_count`` equal, contiguous
    slices of every global batch. Neither given: they come from an initialised
    JAX distributed runtime, else an initialised ``torch.distributed`` process
    group, else 0 and 1; no framework is imported to find out. The resume state
    does not depend on them, so a run resumes on another number of processes.

    A sampler that draws packs (``loaderx.sampler.PackingSampler``, or any
    ``loaderx.protocols.PackedSampler``) is split by whole packs instead of by
    records: its ``packs_per_step`` must divide by processes x bindings, each
    process gets a contiguous run of the step's packs and each of its bindings
    an equal part of that run, and ``StepInfo.pack_offsets`` gives each binding's
    packs."""

    @overload
    def __init__(
        self: Loader[R, Shards[R]],
        streams: Mapping[str, Sequence[Reader[R]]],
        sampler: IndexSampler,
        *,
        transform: None = None,
        workers: int = 4,
        prefetch: int = 4,
        seed: int = 0,
        process_index: int | None = None,
        process_count: int | None = None,
        stats_every: float | None = None,
        on_stats: Callable[[LoaderStats], object] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        streams: Mapping[str, Sequence[Reader[B]]],
        sampler: IndexSampler,
        *,
        transform: Callable[[Shards[B]], T],
        workers: int = 4,
        prefetch: int = 4,
        seed: int = 0,
        process_index: int | None = None,
        process_count: int | None = None,
        stats_every: float | None = None,
        on_stats: Callable[[LoaderStats], object] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        streams: Mapping[str, Sequence[Reader[B]]],
        sampler: IndexSampler,
        *,
        transform: Callable[[Shards[B], StepInfo], T],
        workers: int = 4,
        prefetch: int = 4,
        seed: int = 0,
        process_index: int | None = None,
        process_count: int | None = None,
        stats_every: float | None = None,
        on_stats: Callable[[LoaderStats], object] | None = None,
    ) -> None: ...

    def __init__(
        self,
        streams: Mapping[str, Sequence[Reader[B]]],
        sampler: IndexSampler,
        *,
        transform: Callable[[Shards[B]], T] | Callable[[Shards[B], StepInfo], T] | None = None,
        workers: int = 4,
        prefetch: int = 4,
        seed: int = 0,
        process_index: int | None = None,
        process_count: int | None = None,
        stats_every: float | None = None,
        on_stats: Callable[[LoaderStats], object] | None = None,
    ) -> None:
        checked: Streams[B] = Streams(streams)
        if not _is_sampler(sampler):
            raise TypeError("sampler must have a next() method returning a 1-D uint64 array")
        process = resolve_process(process_index, process_count)
        n = process[1]
        where = f" (process count from {process[2]})" if n != 1 else ""
        packs = _packs_per_step(sampler)
        batch = _batch_size(sampler)
        if packs is not None and packs % (n * checked.width):
            # Packs are never split, so the step's packs, not its records, are
            # divided between the processes and bindings.
            raise InvalidArgumentError(
                f"the sampler's {packs} packs per step do not divide by the "
                f"{split_description(n, checked.width)} of stream {checked.names[0]!r}{where}"
            )
        if packs is None and batch is not None and batch % (n * checked.width):
            raise InvalidArgumentError(
                f"the sampler's batch size {batch} does not divide by the "
                f"{split_description(n, checked.width)} of stream {checked.names[0]!r}{where}"
            )
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        # Threads, each started by the first next(): bounded as the native pool is,
        # so that a mistyped count is refused rather than started.
        w = check_int(workers, "workers", 0, MAX_WORKERS)
        p = check_int(prefetch, "prefetch", 1)
        if p > MAX_PREFETCH:
            raise InvalidArgumentError(f"prefetch must be at most {MAX_PREFETCH}, got {p}")
        s = check_int(seed, "seed", 0, MAX_SEED)
        every = _check_reports(stats_every, on_stats)
        self._pipeline = Pipeline(
            checked, sampler, transform, w, p, s, process[:2], every, on_stats
        )
        self._iterator = LoaderIterator(self._pipeline)

    @property
    def workers(self) -> int:
        return self._pipeline.workers

    @property
    def prefetch(self) -> int:
        return self._pipeline.prefetch

    @property
    def seed(self) -> int:
        """The seed of a two-argument transform's random generators (``StepInfo``)."""
        return self._pipeline.seed

    @property
    def process_index(self) -> int:
        """Which contiguous slice of every global batch this process gathers."""
        return self._pipeline.process_index

    @property
    def process_count(self) -> int:
        """How many slices every global batch is split into, one per process."""
        return self._pipeline.process_count

    def __iter__(self) -> LoaderIterator[B, T]:
        if self._iterator.closed:
            raise InvalidArgumentError("the loader is closed")
        return iter(self._iterator)

    def next(self) -> T:
        """The next step's result (the transform's return value, or the shard list)."""
        return self._iterator.next()

    def __next__(self) -> T:
        return self._iterator.next()

    def state_dict(self) -> State:
        """A small versioned dict of JSON data: the step the loader delivers next,
        what identifies the sampler's sequence, and the streams it reads."""
        return self._iterator.state_dict()

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Resumes at ``state['step']``. Call before the first ``next()``."""
        self._iterator.load_state_dict(state)

    def stats(self) -> LoaderStats:
        """What the loader did since its first ``next()`` or the last
        ``reset_stats()``, as plain JSON data: ``steps`` delivered, ``elapsed_s``,
        ``time_to_first_batch_s`` (the first ``next()`` until it returned; not
        reset), ``input_bound`` (the fraction of the window the consumer spent
        inside ``next()``), ``wait`` (the consumer's wait per step) and ``stages``
        (``draw``, ``gather``, and ``fetch_wait`` and ``transform`` where they
        apply), each ``{"total_s", "p50_s", "p95_s"}`` per step, ``queue`` (the
        finished steps ready at each ``next()``: ``capacity``, ``mean``, ``max``,
        and the fraction ``empty``) and ``bytes_gathered``. See docs/loader.md,
        "Reading the statistics"."""
        return self._iterator.stats()

    def reset_stats(self) -> None:
        """Starts a new window of ``stats()``."""
        self._iterator.reset_stats()

    def close(self) -> None:
        """Stops the workers, waits until none is running, and drops queued
        batches. Idempotent."""
        self._iterator.close()

    @property
    def closed(self) -> bool:
        return self._iterator.closed

    def __enter__(self) -> Loader[B, T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a Loader cannot be pickled: its worker threads and batches belong to this "
            "process. Pickle its readers and sampler (they reopen by reference) and "
            "construct a Loader in the receiving process"
        )

    def __repr__(self) -> str:
        p = self._pipeline
        return (
            f"Loader(streams={p.streams.names}, bindings={p.streams.width}, "
            f"workers={p.workers}, prefetch={p.prefetch}, seed={p.seed}, step={p.delivered}"
            + (f", process={p.process_index}/{p.process_count}" if p.process_count != 1 else "")
            + ")"
        )
