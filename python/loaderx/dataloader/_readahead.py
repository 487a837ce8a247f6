"""Read-ahead by blocks: a Loader over remote readers draws the steps beyond
those it has begun from a copy of its sampler (a sampler is a pure function of
its step) and asks each remote store to fetch those steps' index and data
blocks in the background, within the store's budget of bytes read ahead
(the storage option ``read_ahead_bytes``). Nothing here changes what a step
returns: the steps' gathers find the blocks in memory or the block cache, and
check every record as always."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from ..protocols import IndexSampler, Positions, SeekableSampler
from ..zrecord._reader import StoreReader
from ._streams import Streams

#: Most steps read ahead of the last one begun, however much budget is left
#: (the budget in bytes is what bounds memory and the cache's share). A step of
#: 256 tiny records takes a fraction of a millisecond once its blocks are in,
#: and a step's blocks take two dependent round trips (index, then data): 512
#: steps cover about 100 ms of such steps, where 64 covered about 15.
STEPS = 512

#: Where this process's positions lie in a drawn step: ``(offset, stop,
#: bounds, packs)``, as ``Pipeline.split`` returns them.
Split = Callable[[int, IndexSampler], tuple[int, int, list[int], Any]]


class ReadAhead:
    """The steps a Loader has not begun yet, warmed on its remote readers."""

    @classmethod
    def of(cls, streams: Streams[Any], sampler: IndexSampler, split: Split) -> ReadAhead | None:
        """The read-ahead of a Loader over `streams`, or None: without a remote
        reader there is nothing to fetch, and a sampler that cannot seek (so
        its steps may not be a function of the step) or cannot be copied gets
        none."""
        per_binding: list[list[StoreReader[Any]]] = [[] for _ in range(streams.width)]
        for readers in streams.lists:
            for i, r in enumerate(readers):
                if isinstance(r, StoreReader) and r.url is not None:
                    per_binding[i].append(cast("StoreReader[Any]", r))
        if not any(per_binding) or not isinstance(sampler, SeekableSampler):
            return None
        return cls(sampler, per_binding, split)

    def __init__(
        self, sampler: IndexSampler, per_binding: list[list[StoreReader[Any]]], split: Split
    ) -> None:
        self.sampler = sampler
        self.per_binding = per_binding
        self.split = split
        # The copy, made before the Loader's first draw; None before, and once
        # read-ahead has stopped.
        self.peek: IndexSampler | None = None
        self.stopped = False
        self.drawn = 0  # the step the copy draws next
        # The step drawn last and the warms of it the stores refused (their
        # budget was full), tried again at the next call.
        self.todo: list[tuple[StoreReader[Any], Positions]] | None = None
        # The fewest steps the warms of that step covered, over its stores.
        self.covered: int | None = None

    def before_first_draw(self, step: int) -> None:
        """Copies the sampler as it stands before the Loader draws `step`, its
        first (a resumed Loader's first step is the one it resumes at). A
        sampler that cannot be copied reads nothing ahead."""
        try:
            self.peek = copy.deepcopy(self.sampler)
        except Exception:  # noqa: BLE001 - read-ahead is optional
            self.stopped = True
            return
        self.drawn = step

    def advance(self, begun: int) -> None:
        """Warms the steps from `begun` (the first not begun yet) on, up to
        ``STEPS`` beyond it, until a store's budget is full. Called under the
        Loader's draw lock. A step that fails to draw or split here fails when
        it is begun; read-ahead stops."""
        peek = self.peek
        if peek is None:
            return
        try:
            if self.drawn <= begun:
                # Begun (or being begun) without read-ahead: skip to the first
                # that is not.
                self.todo = None
                self.skip_to(peek, begun)
            while self.todo is not None or self.drawn < begun + STEPS:
                if self.todo is None:
                    self.todo = self.positions(peek)
                    self.drawn += 1
                    self.covered = None
                refused: list[tuple[StoreReader[Any], Positions]] = []
                for r, p in self.todo:
                    n = r._warm(p)  # pyright: ignore[reportPrivateUsage]
                    if n == 0:
                        refused.append((r, p))
                    else:
                        self.covered = n if self.covered is None else min(self.covered, n)
                if refused:
                    self.todo = refused
                    return
                self.todo = None
                if self.covered is not None and self.covered > 1:
                    # Every store found the steps before held: the next ones
                    # are not drawn, only jumped over.
                    self.skip_to(peek, self.drawn + self.covered - 1)
        except Exception:  # noqa: BLE001 - the step itself raises when it is begun
            self.stop()

    def skip_to(self, peek: IndexSampler, step: int) -> None:
        """Moves the copy on to draw `step` next, by a seek (the copy is of a
        sampler that seeks) where that is past the step it draws next."""
        if step > self.drawn:
            cast("SeekableSampler", peek).seek(step)
            self.drawn = step

    def positions(self, peek: IndexSampler) -> list[tuple[StoreReader[Any], Positions]]:
        """The next step of the copy: each remote reader with its binding's
        positions, views of the copy's buffer, which its next draw overwrites: a
        warm copies them before it returns, and a refused one is tried again
        before the copy draws again."""
        idx = np.asarray(peek.next())
        offset, _, bounds, _ = self.split(len(idx), peek)
        out: list[tuple[StoreReader[Any], Positions]] = []
        for i, readers in enumerate(self.per_binding):
            if readers:
                pos = cast("Positions", idx[offset + bounds[i] : offset + bounds[i + 1]])
                out.extend((r, pos) for r in readers)
        return out

    def stop(self) -> None:
        self.stopped = True
        self.peek = None
        self.todo = None

    def cancel(self) -> None:
        """Stops read-ahead, and what the stores fetch ahead, freeing their
        budgets."""
        self.stop()
        for readers in self.per_binding:
            for r in readers:
                r._cancel_warm()  # pyright: ignore[reportPrivateUsage]
