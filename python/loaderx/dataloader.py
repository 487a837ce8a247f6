"""The Loader: one global batch per step, split across reader bindings.

Each step draws one global index array from the sampler, divides it into
contiguous zero-copy views (one per binding position), gathers every named stream
at each position with the same view, and hands the list of shard dicts to the
transform. Batches reach the consumer in step order with any number of workers,
so ``state_dict()`` / ``load_state_dict()`` resume exactly. See docs/loader.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ._schema import check_int
from .sampler import Sampler

__all__ = ["Loader"]

STATE_VERSION = 1
_POLL = 0.05  # seconds between checks of the closed flag while waiting


def _sampler_key(sampler: Any) -> Any:
    """What identifies the sampler's sequence of batches, for refusing a resume
    state taken with another configuration."""
    key = getattr(sampler, "_config", None)
    return key() if callable(key) else None


def _batch_size(sampler: Any) -> int | None:
    """The sampler's batch size when it can be known before the first draw."""
    if isinstance(sampler, Sampler):
        return sampler._config()[1]
    size = getattr(sampler, "batch_size", None)
    return size if isinstance(size, int) else None


def _validate_streams(streams: Any) -> tuple[list[str], list[list[Any]]]:
    if not isinstance(streams, Mapping):
        raise TypeError(
            f"streams must be a dict of name -> list of readers, got {type(streams).__name__}"
        )
    if not streams:
        raise ValueError("streams is empty; name at least one stream")
    names, lists, width, length = [], [], None, None
    for name, readers in streams.items():
        if not isinstance(name, str):
            raise TypeError(f"stream names must be str, got {name!r}")
        if not isinstance(readers, Sequence) or isinstance(readers, (str, bytes)):
            raise TypeError(
                f"stream {name!r} must be a list of readers (one per binding), "
                f"got {type(readers).__name__}"
            )
        if len(readers) == 0:
            raise ValueError(f"stream {name!r} has no readers; each stream needs >= 1 binding")
        if width is not None and len(readers) != width:
            raise ValueError(
                f"stream {name!r} has {len(readers)} bindings but {names[0]!r} has {width}; "
                "all binding lists must be equally long"
            )
        width = len(readers)
        for r in readers:
            if not callable(getattr(r, "gather", None)):
                raise TypeError(
                    f"stream {name!r} holds a {type(r).__name__}, "
                    "not an open Dense or Ragged reader"
                )
            n = len(r)
            if length is not None and n != length:
                raise ValueError(
                    f"stream {name!r} has {n} records but {names[0]!r} has {length}; "
                    "aligned streams need equal record counts"
                )
            length = n
        names.append(name)
        lists.append(list(readers))
    return names, lists


class _Step:
    """A finished step: its result or the exception it raised."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


class Loader:
    """Endless, step-ordered batches from aligned streams.

    ``workers=0`` draws, gathers and transforms in the caller's thread. Positive
    ``workers`` are threads: each draws and gathers a step under one lock, then
    transforms it concurrently with the others. At most ``workers + prefetch``
    batches are live besides those the consumer holds; finished batches wait in
    step order, so delivery order never depends on which worker was faster."""

    def __init__(
        self,
        streams: Mapping[str, Sequence[Any]],
        sampler: Any,
        *,
        transform: Callable[[list[dict[str, Any]]], Any] | None = None,
        workers: int = 4,
        prefetch: int = 4,
    ) -> None:
        self._names, self._lists = _validate_streams(streams)
        self._width = len(self._lists[0])
        if not callable(getattr(sampler, "next", None)):
            raise TypeError("sampler must have a next() method returning a 1-D uint64 array")
        batch = _batch_size(sampler)
        if batch is not None and batch % self._width:
            raise ValueError(
                f"the sampler's batch size {batch} does not divide by the {self._width} "
                f"bindings of stream {self._names[0]!r}"
            )
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        self._workers = check_int(workers, "workers", 0)
        self._prefetch = check_int(prefetch, "prefetch", 1)
        self._sampler = sampler
        self._transform = transform
        self._cond = threading.Condition(threading.Lock())
        self._draw = threading.Lock()  # serializes draw and gather across workers
        self._claimed = 0  # next step a worker will draw
        self._delivered = 0  # next step the consumer receives
        self._done: dict[int, _Step] = {}
        self._threads: list[threading.Thread] = []
        self._started = False
        self._closed = False
        self._failed: BaseException | None = None

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def prefetch(self) -> int:
        return self._prefetch

    # -- one step ---------------------------------------------------------------

    def _shards(self, idx: Any) -> list[dict[str, Any]]:
        idx = np.asarray(idx)
        if idx.ndim != 1:
            raise ValueError(f"the sampler returned an array of shape {idx.shape}; expected 1-D")
        if idx.dtype.kind not in "iu":
            raise TypeError(f"the sampler returned {idx.dtype} positions; expected integers")
        if idx.dtype.itemsize != 8 or not idx.flags.c_contiguous:
            # Readers gather from 64-bit positions; a sampler's narrower or strided
            # positions are widened once here (the values never change).
            idx = np.ascontiguousarray(idx, np.uint64 if idx.dtype.kind == "u" else np.int64)
        b, k = len(idx), self._width
        if b % k:
            raise ValueError(f"the sampler's batch of {b} does not divide by {k} bindings")
        per = b // k
        return [
            {
                name: readers[i].gather(idx[i * per : (i + 1) * per])
                for name, readers in zip(self._names, self._lists, strict=True)
            }
            for i in range(k)
        ]

    def _finish(self, shards: list[dict[str, Any]]) -> Any:
        return shards if self._transform is None else self._transform(shards)

    # -- worker threads -----------------------------------------------------------

    def _start(self) -> None:
        self._started = True
        for i in range(self._workers):
            t = threading.Thread(target=self._work, name=f"loaderx-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def _work(self) -> None:
        limit = self._workers + self._prefetch
        while True:
            # The spec's policy: draw and gather under one lock, transform outside
            # it. The gather is parallel inside, so concurrent gathers would only
            # compete for the same cores, and the gather reads the sampler's
            # reused buffer without a copy before the next draw overwrites it.
            with self._draw:
                with self._cond:
                    while not self._closed and self._claimed - self._delivered >= limit:
                        self._cond.wait(_POLL)
                    if self._closed or self._failed is not None:
                        return
                    step = self._claimed
                    self._claimed += 1
                shards, result = None, None
                try:
                    shards = self._shards(self._sampler.next())
                except BaseException as e:  # noqa: BLE001 - delivered to the consumer
                    result = _Step(error=e)
            if result is None:
                try:
                    result = _Step(self._finish(shards))
                except BaseException as e:  # noqa: BLE001 - delivered to the consumer
                    result = _Step(error=e)
            failed = result.error is not None
            with self._cond:
                if self._closed:
                    return
                self._done[step] = result
                self._cond.notify_all()
            # Drop this thread's references before waiting for the next claim, or a
            # batch the consumer already discarded would stay alive past the bound.
            del result, shards
            if failed:
                return

    # -- consumer side ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the loader is closed")
        if self._failed is not None:
            raise RuntimeError(
                f"the loader stopped at step {self._delivered} after an error"
            ) from self._failed

    def next(self) -> Any:
        """The next step's result (the transform's return value, or the shard list)."""
        self._check_open()
        if self._workers == 0:
            try:
                out = self._finish(self._shards(self._sampler.next()))
            except BaseException as e:
                self._failed = e
                raise
            self._delivered += 1
            return out
        with self._cond:
            if not self._started:
                self._start()
            step = self._delivered
            while step not in self._done:
                self._check_open()
                self._cond.wait(_POLL)
            item = self._done.pop(step)
            if item.error is not None:
                self._failed = item.error
                self._cond.notify_all()
                raise item.error
            self._delivered += 1
            self._cond.notify_all()
            return item.value

    __next__ = next

    def __iter__(self) -> Loader:
        return self

    # -- resume -------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A small versioned dict: the step the loader delivers next, and what
        identifies the sampler's sequence."""
        return {
            "version": STATE_VERSION,
            "step": self._delivered,
            "sampler": _sampler_key(self._sampler),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes at ``state['step']``. Call before the first ``next()``."""
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"loader state version {state.get('version')!r} is not {STATE_VERSION}"
            )
        if self._started or self._delivered or self._claimed:
            raise RuntimeError("load_state_dict must be called before the first next()")
        step = check_int(state.get("step"), "state['step']", 0)
        key = _sampler_key(self._sampler)
        if state.get("sampler") != key:
            raise ValueError(
                f"the state was taken with sampler {state.get('sampler')!r}, "
                f"this loader's sampler is {key!r}"
            )
        seek = getattr(self._sampler, "seek", None)
        if step and not callable(seek):
            raise TypeError("resuming needs a sampler with seek(step)")
        if callable(seek):
            seek(step)
        self._delivered = self._claimed = step

    # -- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        """Stops the workers and drops queued batches. Idempotent and prompt: a
        worker inside a slow transform finishes it in the background and exits."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._done.clear()
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=_POLL)
        self._threads = [t for t in self._threads if t.is_alive()]

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    def __repr__(self) -> str:
        return (
            f"Loader(streams={self._names}, bindings={self._width}, workers={self._workers}, "
            f"prefetch={self._prefetch}, step={self._delivered})"
        )
