"""The Loader: one global batch per step, split across reader bindings.

Each step draws one global index array from the sampler, divides it into
contiguous zero-copy views (one per binding position), gathers every named stream
at each position with the same view, and hands the list of shard dicts to the
transform. Batches reach the consumer in step order with any number of workers,
so ``state_dict()`` / ``load_state_dict()`` resume exactly. See docs/loader.md.

``Loader`` holds the configuration; the step state and the worker threads live in
its one ``LoaderIterator``, which ``iter(loader)`` returns every time.

A transform that takes a second argument gets a ``StepInfo``: the step, the
positions this process gathered and random generators derived from the loader's
seed, the step and (per record) the record's place in the global batch, so that
random augmentation is the same with any number of workers, after a resume and,
per record, with any number of processes.

With several processes (data-parallel training), every process draws the same
global batch and gathers only its contiguous slice; its bindings split that
slice. The process's rank and the process count come from the arguments, else
from a JAX or torch.distributed runtime that is already initialised, else 0 of 1.
"""

from __future__ import annotations

import atexit
import inspect
import numbers
import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, NoReturn, TypeAlias, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from ._schema import check_int
from .errors import InvalidArgumentError
from .protocols import (
    ConfiguredSampler,
    IndexSampler,
    Positions,
    PrefetchingReader,
    Reader,
    SeekableSampler,
    SizedSampler,
)
from .sampler import Sampler

__all__ = ["Loader", "LoaderIterator", "STATE_VERSION", "StepInfo", "record_rng", "step_rng"]

STATE_VERSION = 3
_MAX_SEED = 2**64 - 1
_POLL = 0.05  # seconds between checks of the closed flag while waiting

JSON: TypeAlias = "None | bool | int | str | list[JSON] | dict[str, JSON]"
State: TypeAlias = "dict[str, JSON]"

B = TypeVar("B")  # what one reader's gather returns
T = TypeVar("T")  # what the consumer receives per step
R = TypeVar("R")  # B, for the constructor overload that fixes T from it
Shards: TypeAlias = list[dict[str, B]]


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The random generator a transform gets for `step` of a loader with `seed`:
    NumPy's Philox4x64-10 with the 128-bit key ``(seed, step)`` (two 64-bit words,
    ``seed`` first) and the counter at 0. Each (seed, step) pair is its own key,
    so the streams of different steps never overlap, and a step's stream depends
    on nothing else: not on the workers, the steps before it or a resume."""
    s = check_int(seed, "seed", 0, _MAX_SEED)
    t = check_int(step, "step", 0, _MAX_SEED)
    return np.random.Generator(np.random.Philox(key=s | t << 64))


def record_rng(seed: int, step: int, index: int) -> np.random.Generator:
    """The random generator of the record at place `index` of the global batch of
    `step` (``0 <= index < batch size``), for a loader with `seed`: NumPy's
    Philox4x64-10 with the key of ``step_rng(seed, step)`` and the 256-bit counter
    starting at the words ``(0, index, 1, 0)``. Its stream never meets the step's
    (whose counter's third word is 0) nor another record's (another second word)
    before 2**64 blocks, and it depends on nothing but the three numbers: not on
    the processes, the bindings or the workers that share the batch."""
    s = check_int(seed, "seed", 0, _MAX_SEED)
    t = check_int(step, "step", 0, _MAX_SEED)
    i = check_int(index, "index", 0, _MAX_SEED)
    return np.random.Generator(np.random.Philox(key=s | t << 64, counter=i << 64 | 1 << 128))


class StepInfo:
    """What a two-argument transform receives with each step's shards.

    ``step`` is the step number (the one ``state_dict()`` counts); ``positions``
    the part of the sampler's global batch this process gathered (a read-only
    copy, before the split into bindings: the whole batch with one process);
    ``offset`` the place of ``positions[0]`` in the global batch and
    ``batch_size`` the global batch's size; ``process_index`` and
    ``process_count`` the loader's. ``rng`` is a NumPy Generator derived from the
    loader's seed and the step only (``step_rng(seed, step)``, the same in every
    process), created on first use; ``record_rng(j)`` one for the record at
    ``positions[j]``, derived from the seed, the step and ``offset + j``."""

    __slots__ = (
        "step",
        "positions",
        "offset",
        "batch_size",
        "process_index",
        "process_count",
        "_seed",
        "_rng",
    )

    step: int
    positions: npt.NDArray[np.integer]
    offset: int
    batch_size: int
    process_index: int
    process_count: int

    def __init__(
        self,
        step: int,
        positions: npt.NDArray[np.integer],
        seed: int,
        *,
        offset: int = 0,
        batch_size: int | None = None,
        process_index: int = 0,
        process_count: int = 1,
    ) -> None:
        self.step = step
        self.positions = positions
        self.offset = offset
        self.batch_size = len(positions) if batch_size is None else batch_size
        self.process_index = process_index
        self.process_count = process_count
        self._seed = seed
        self._rng: np.random.Generator | None = None

    @property
    def seed(self) -> int:
        """The loader's seed."""
        return self._seed

    @property
    def rng(self) -> np.random.Generator:
        """This step's generator: the same object on every access within the step."""
        if self._rng is None:
            self._rng = step_rng(self._seed, self.step)
        return self._rng

    def record_rng(self, j: int) -> np.random.Generator:
        """A new generator for the record at ``positions[j]``:
        ``record_rng(seed, step, offset + j)``. It is the same for that record of
        the global batch with any number of processes, bindings or workers."""
        n = len(self.positions)
        i = check_int(j, "j", 0)
        if i >= n:
            raise InvalidArgumentError(f"j must be in 0..{n - 1} (this step's positions), got {i}")
        return record_rng(self._seed, self.step, self.offset + i)

    def __repr__(self) -> str:
        where = ""
        if self.process_count != 1:
            where = (
                f", offset={self.offset}, batch_size={self.batch_size}, "
                f"process={self.process_index}/{self.process_count}"
            )
        return (
            f"StepInfo(step={self.step}, positions={len(self.positions)}{where}, seed={self._seed})"
        )


def _runtime_process() -> tuple[int, int, str] | None:
    """(rank, count, which runtime) from a JAX or torch.distributed runtime that is
    initialised, or None. Looks only at modules already imported: importing a
    framework to learn that it is not in use would cost seconds, and JAX would
    claim devices on import of its backends."""
    # Any: duck-typed access to modules this package does not depend on.
    jax: Any = sys.modules.get("jax")
    if jax is not None:
        initialized: object = getattr(getattr(jax, "distributed", None), "is_initialized", None)
        if callable(initialized) and initialized():
            index: object = jax.process_index()
            count: object = jax.process_count()
            return _runtime_int(index, "jax"), _runtime_int(count, "jax"), "jax"
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None:
        available: object = getattr(dist, "is_available", None)
        initialized = getattr(dist, "is_initialized", None)
        if callable(available) and available() and callable(initialized) and initialized():
            rank: object = dist.get_rank()
            world: object = dist.get_world_size()
            return _runtime_int(rank, "torch"), _runtime_int(world, "torch"), "torch.distributed"
    return None


def _runtime_int(value: object, runtime: str) -> int:
    v = _exact_int(value)
    if v is None or v < 0:
        raise RuntimeError(f"{runtime} reported the process rank or count {value!r}")
    return v


def _process(index: object, count: object) -> tuple[int, int, str]:
    """The loader's (process_index, process_count, where they came from)."""
    if index is None and count is None:
        found = _runtime_process()
        if found is None:
            return 0, 1, "default"
        i, n, source = found
    elif index is None or count is None:
        names = ("process_index", "process_count")
        given, missing = names if count is None else names[::-1]
        raise InvalidArgumentError(
            f"{given} is given but {missing} is not; give both, or neither to take them "
            "from an initialised JAX or torch.distributed runtime"
        )
    else:
        i = check_int(index, "process_index", 0)
        n = check_int(count, "process_count", 1)
        source = "arguments"
    if i >= n:
        raise InvalidArgumentError(f"process_index {i} is not below process_count {n} ({source})")
    return i, n, source


def _takes_step(transform: Callable[..., object]) -> bool:
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
        raise TypeError(
            f"transform {getattr(transform, '__qualname__', transform)!r}{sig} cannot be "
            "called with the shard list alone, nor with the shard list and a StepInfo"
        ) from None
    return False


def _plain(value: object, what: str) -> JSON:
    """`value` as JSON data (tuples become lists), or a TypeError naming `what`."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, what) for v in cast("Sequence[object]", value)]
    if isinstance(value, Mapping):
        out: dict[str, JSON] = {}
        for k, v in cast("Mapping[object, object]", value).items():
            if not isinstance(k, str):
                raise TypeError(f"{what} has the key {k!r}; resume states use str keys only")
            out[k] = _plain(v, what)
        return out
    raise TypeError(
        f"{what} holds a {type(value).__name__} ({value!r}); resume states hold only "
        "dict, list, str, int, bool and None, so that they survive JSON"
    )


def _sampler_key(sampler: IndexSampler) -> JSON:
    """What identifies the sampler's sequence of batches, for refusing a resume
    state taken with another configuration."""
    if isinstance(sampler, ConfiguredSampler):
        # _config is the sampler's hook for this, underscored to keep it off the
        # sampler's public surface.
        config = sampler._config()  # pyright: ignore[reportPrivateUsage]
        return _plain(config, "the sampler's _config()")
    return None


def _store_identity(reader: object, where: str) -> int | str | None:
    """The identity of the store `reader` reads: its ``identity``, else its
    ``header_checksum``, else None."""
    value: object = getattr(reader, "identity", None)
    if value is None:
        value = getattr(reader, "header_checksum", None)
    if callable(value):
        value = value()
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if not isinstance(value, bool) and isinstance(value, numbers.Integral):
        return int(value)
    raise TypeError(
        f"{where}: the reader's store identity is a {type(value).__name__}; "
        "expected an int, a str or bytes"
    )


def _batch_size(sampler: IndexSampler) -> int | None:
    """The sampler's batch size when it can be known before the first draw."""
    if isinstance(sampler, Sampler):
        return sampler._config()[1]  # pyright: ignore[reportPrivateUsage]
    if isinstance(sampler, SizedSampler):
        return _exact_int(sampler.batch_size)
    return None


def _split(processes: int, bindings: int) -> str:
    if processes == 1:
        return f"{bindings} bindings"
    return f"{processes} processes x {bindings} bindings = {processes * bindings}"


def _exact_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_mapping(value: object, message: str) -> Mapping[object, object]:
    # The public signatures are typed, but callers need not be: check at run time.
    if not isinstance(value, Mapping):
        raise TypeError(f"{message}, got {type(value).__name__}")
    return cast("Mapping[object, object]", value)


def _is_sampler(sampler: object) -> bool:
    return isinstance(sampler, IndexSampler) and callable(sampler.next)


class _Streams(Generic[B]):
    """The validated streams: names, per-binding readers, and what the resume state
    records about them."""

    def __init__(self, streams: object) -> None:
        if not isinstance(streams, Mapping):
            raise TypeError(
                f"streams must be a dict of name -> list of readers, got {type(streams).__name__}"
            )
        items = cast("Mapping[object, object]", streams)
        if not items:
            raise InvalidArgumentError("streams is empty; name at least one stream")
        names: list[str] = []
        lists: list[list[Reader[B]]] = []
        width: int | None = None
        length: int | None = None
        for name, readers in items.items():
            if not isinstance(name, str):
                raise TypeError(f"stream names must be str, got {name!r}")
            if not isinstance(readers, Sequence) or isinstance(readers, (str, bytes)):
                raise TypeError(
                    f"stream {name!r} must be a list of readers (one per binding), "
                    f"got {type(readers).__name__}"
                )
            bindings = list(cast("Sequence[object]", readers))
            if not bindings:
                raise InvalidArgumentError(
                    f"stream {name!r} has no readers; each stream needs >= 1 binding"
                )
            if width is not None and len(bindings) != width:
                raise InvalidArgumentError(
                    f"stream {name!r} has {len(bindings)} bindings but {names[0]!r} has "
                    f"{width}; all binding lists must be equally long"
                )
            width = len(bindings)
            for r in bindings:
                if not isinstance(r, Reader):
                    raise TypeError(
                        f"stream {name!r} holds a {type(r).__name__}, "
                        "not an open Dense or Ragged reader"
                    )
                n = len(cast("Reader[B]", r))
                if length is not None and n != length:
                    raise InvalidArgumentError(
                        f"stream {name!r} has {n} records but {names[0]!r} has {length}; "
                        "aligned streams need equal record counts"
                    )
                length = n
            names.append(name)
            lists.append(cast("list[Reader[B]]", bindings))
        assert width is not None and length is not None
        self.names, self.lists, self.width, self.length = names, lists, width, length
        self.prefetching = [
            [isinstance(r, PrefetchingReader) for r in readers] for readers in lists
        ]
        self.stores: list[list[int | str | None]] = [
            [_store_identity(r, f"stream {n!r} binding {i}") for i, r in enumerate(readers)]
            for n, readers in zip(names, lists, strict=True)
        ]

    def state(self) -> dict[str, JSON]:
        """Per stream name: its record count and each binding's store identity."""
        return {
            name: {"records": self.length, "stores": list(stores)}
            for name, stores in zip(self.names, self.stores, strict=True)
        }

    def check(self, got: object) -> None:
        """Raises ValueError naming the first difference between a state's
        ``streams`` entry and these streams."""
        if not isinstance(got, Mapping):
            raise InvalidArgumentError(
                f"the state's 'streams' is {got!r}, not a dict of stream name -> records and stores"
            )
        theirs = cast("Mapping[object, object]", got)
        mine = self.state()
        if set(theirs) != set(mine):
            raise InvalidArgumentError(
                f"the state was taken with streams {sorted(map(str, theirs))}, "
                f"this loader reads {sorted(mine)}"
            )
        for name, entry in mine.items():
            want = cast("dict[str, JSON]", entry)
            found = theirs[name]
            if not isinstance(found, Mapping):
                raise InvalidArgumentError(f"the state's stream {name!r} is {found!r}, not a dict")
            fields = cast("Mapping[object, object]", found)
            if fields.get("records") != want["records"]:
                raise InvalidArgumentError(
                    f"stream {name!r} had {fields.get('records')!r} records when the state "
                    f"was taken, this loader's has {want['records']}"
                )
            stores = _plain(fields.get("stores"), f"the state's stream {name!r} stores")
            mine_stores = cast("list[JSON]", want["stores"])
            if not isinstance(stores, list) or len(stores) != len(mine_stores):
                count = len(stores) if isinstance(stores, list) else stores
                raise InvalidArgumentError(
                    f"stream {name!r} had {count!r} bindings when the state was taken, "
                    f"this loader has {len(mine_stores)}"
                )
            for i, (a, b) in enumerate(zip(stores, mine_stores, strict=True)):
                if a != b:
                    raise InvalidArgumentError(
                        f"stream {name!r} binding {i} read store {a!r} when the state was "
                        f"taken, this loader's reads store {b!r}"
                    )


class _Later(Generic[B]):
    """A binding's batch that a prefetching reader is still reading."""

    __slots__ = ("wait",)

    def __init__(self, wait: Callable[[], B]) -> None:
        self.wait = wait

    def cancel(self) -> None:
        cancel: Callable[[], object] | None = getattr(self.wait, "cancel", None)
        if callable(cancel):
            cancel()


# A begun step: per binding, per stream, the batch or what waits for it.
_Parts: TypeAlias = "list[dict[str, B | _Later[B]]]"


class _Begun(Generic[B]):
    """A step drawn and begun under the draw lock, not yet completed."""

    __slots__ = ("error", "info", "parts", "step", "waits")

    def __init__(
        self,
        step: int,
        parts: _Parts[B] | None = None,
        info: StepInfo | None = None,
        error: BaseException | None = None,
        waits: bool = False,
    ) -> None:
        self.step, self.parts, self.info, self.error = step, parts, info, error
        self.waits = waits  # some of its reads are still under way

    def cancel(self) -> None:
        """Stops the reads still under way that can be stopped."""
        for shard in self.parts or ():
            for v in shard.values():
                if isinstance(v, _Later):
                    cast("_Later[B]", v).cancel()


class _Step(Generic[T]):
    """A finished step: its result or the exception it raised."""

    __slots__ = ("value", "error")

    def __init__(self, value: T | None = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


# Pipelines whose workers have started: closed and joined at interpreter exit, and
# given fresh locks in a forked child.
_STARTED: weakref.WeakSet[_Pipeline[object, object]] = weakref.WeakSet()


class _Pipeline(Generic[B, T]):
    """The step state and the worker threads. The threads reference this object,
    never the LoaderIterator, so dropping the iterator lets it be collected, and
    its finalizer stops them."""

    def __init__(
        self,
        streams: _Streams[B],
        sampler: IndexSampler,
        transform: Callable[..., T] | None,
        workers: int,
        prefetch: int,
        seed: int,
        process: tuple[int, int],
    ) -> None:
        self.streams = streams
        self.sampler = sampler
        self.transform = transform
        self.with_step = transform is not None and _takes_step(transform)
        self.workers = workers
        self.prefetch = prefetch
        self.seed = seed
        self.process_index, self.process_count = process
        self.cond = threading.Condition(threading.Lock())
        self.draw = threading.Lock()  # serializes draw and gather across workers
        self.claimed = 0  # next step a worker will draw
        self.delivered = 0  # next step the consumer receives
        self.done: dict[int, _Step[T]] = {}
        # Steps begun and not yet taken by a worker; only touched under `draw`.
        self.begun: deque[_Begun[B]] = deque()
        # Steps whose reads a thread is waiting for; close() cancels them.
        self.completing: set[_Begun[B]] = set()
        self.threads: list[threading.Thread] = []
        self.started = False
        self.closed = False
        self.failed: BaseException | None = None
        self.pid = os.getpid()

    # -- one step ---------------------------------------------------------------

    def begin(self, step: int, drawn: object) -> _Begun[B]:
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
        if b % (n * k):
            raise InvalidArgumentError(
                f"the sampler's batch of {b} does not divide by {_split(n, k)}"
            )
        # This process's contiguous slice of the global batch, a view like the
        # bindings' parts of it.
        local = b // n
        offset = self.process_index * local
        positions = cast("Positions", idx[offset : offset + local])
        per = local // k
        parts: _Parts[B] = []
        waits = False
        streams = self.streams
        for i in range(k):
            shard: dict[str, B | _Later[B]] = {}
            for name, readers, prefetching in zip(
                streams.names, streams.lists, streams.prefetching, strict=True
            ):
                pos = positions[i * per : (i + 1) * per]
                later = None
                if prefetching[i]:
                    later = cast("PrefetchingReader[B]", readers[i]).prefetch(pos)
                if later is None:
                    shard[name] = readers[i].gather(pos)
                else:
                    shard[name] = _Later(later)
                    waits = True
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
            )
        return _Begun(step, parts, info, waits=waits)

    def completed(self, item: _Begun[B]) -> Shards[B]:
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
                    shard[name] = cast("_Later[B]", v).wait() if isinstance(v, _Later) else v
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

    # -- worker threads -----------------------------------------------------------

    def start(self) -> None:
        self.started = True
        self.pid = os.getpid()
        _STARTED.add(cast("_Pipeline[object, object]", self))
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
                        self.cond.wait(_POLL)
                    if self.closed or self.failed is not None:
                        return
                while True:
                    with self.cond:
                        if self.claimed - self.delivered >= limit:
                            break
                        step = self.claimed
                        self.claimed += 1
                    try:
                        item = self.begin(step, self.sampler.next())
                    except BaseException as e:  # noqa: BLE001 - delivered to the consumer
                        self.begun.append(_Begun(step, error=e))
                        break
                    self.begun.append(item)
                    if not item.waits:
                        break
                # Rebinds `item`: no local name may keep a begun step's batches
                # alive once the consumer has dropped them.
                item = self.begun.popleft()
            result: _Step[T]
            if item.error is not None:
                result = _Step(error=item.error)
            else:
                try:
                    result = _Step(self.finish(self.completed(item), item.info))
                except BaseException as e:  # noqa: BLE001 - delivered to the consumer
                    result = _Step(error=e)
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
        if self.workers == 0:
            # One step at a time, so that consumers on several threads never draw
            # into the sampler's buffer while another gathers from it.
            with self.draw:
                self.check_open()
                try:
                    item = self.begin(self.delivered, self.sampler.next())
                    out = self.finish(self.completed(item), item.info)
                except BaseException as e:
                    self.failed = e
                    raise
                self.delivered += 1
                return out
        with self.cond:
            if not self.started:
                self.start()
            # Read at every wake-up: another consumer thread may have taken the step.
            while self.delivered not in self.done:
                self.check_open()
                self.cond.wait(_POLL)
            item = self.done.pop(self.delivered)
            if item.error is not None:
                self.failed = item.error
                self.cond.notify_all()
                raise item.error
            self.delivered += 1
            self.cond.notify_all()
            return cast("T", item.value)

    # -- lifetime -----------------------------------------------------------------

    def close(self, join: bool = True) -> None:
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


class LoaderIterator(Iterator[T], Generic[B, T]):
    """The state of one pass over a Loader's endless steps: the next step, the
    batches in flight and the worker threads. ``iter(loader)`` returns its
    loader's one LoaderIterator; it is not constructed directly."""

    def __init__(self, pipeline: _Pipeline[B, T]) -> None:
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
            "sampler": _sampler_key(p.sampler),
            "streams": p.streams.state(),
        }

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Resumes at ``state['step']``. Call before the first ``next()``."""
        p = self._pipeline
        given = _as_mapping(state, "state must be a dict from state_dict()")
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
        key = _sampler_key(p.sampler)
        theirs = _plain(given.get("sampler"), "the state's sampler")
        if theirs != key:
            raise InvalidArgumentError(
                f"the state was taken with sampler {theirs!r}, this loader's sampler is {key!r}"
            )
        if isinstance(p.sampler, SeekableSampler):
            p.sampler.seek(step)
        elif step:
            raise TypeError("resuming needs a sampler with seek(step)")
        p.delivered = p.claimed = step

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
    transforms it concurrently with the others. At most ``workers + prefetch``
    batches are live besides those the consumer holds; finished batches wait in
    step order, so delivery order never depends on which worker was faster.

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
    does not depend on them, so a run resumes on another number of processes."""

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
    ) -> None:
        checked: _Streams[B] = _Streams(streams)
        if not _is_sampler(sampler):
            raise TypeError("sampler must have a next() method returning a 1-D uint64 array")
        process = _process(process_index, process_count)
        n = process[1]
        batch = _batch_size(sampler)
        if batch is not None and batch % (n * checked.width):
            raise InvalidArgumentError(
                f"the sampler's batch size {batch} does not divide by the "
                f"{_split(n, checked.width)} of stream {checked.names[0]!r}"
                + (f" (process count from {process[2]})" if n != 1 else "")
            )
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        w = check_int(workers, "workers", 0)
        p = check_int(prefetch, "prefetch", 1)
        s = check_int(seed, "seed", 0, _MAX_SEED)
        self._pipeline = _Pipeline(checked, sampler, transform, w, p, s, process[:2])
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
