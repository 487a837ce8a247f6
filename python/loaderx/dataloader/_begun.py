"""A step between its draw and its delivery: the batches or the reads still under
way per binding and stream (``Later``), the begun step (``Begun``) and the
finished one with what it cost (``Step``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeAlias, TypeVar, cast

from ._rng import StepInfo

B = TypeVar("B")  # what one reader's gather returns
T = TypeVar("T")  # what the consumer receives per step


class Later(Generic[B]):
    """A binding's batch that a prefetching reader is still reading, or that the
    background gather thread has yet to gather."""

    __slots__ = ("wait",)

    def __init__(self, wait: Callable[[], B]) -> None:
        self.wait = wait

    def cancel(self) -> None:
        cancel: Callable[[], object] | None = getattr(self.wait, "cancel", None)
        if callable(cancel):
            cancel()

    @property
    def ready(self) -> bool:
        return getattr(self.wait, "ready", False) is True

    @property
    def work_ns(self) -> int:
        """The background gather thread's time on it, once it ran (else 0)."""
        ns = getattr(self.wait, "work_ns", None)
        return ns if type(ns) is int else 0


# A begun step: per binding, per stream, the batch or what waits for it.
Parts: TypeAlias = "list[dict[str, B | Later[B]]]"


class Begun(Generic[B]):
    """A step drawn and begun under the draw lock, not yet completed."""

    __slots__ = (
        "draw_ns",
        "end_ns",
        "error",
        "fetch_ns",
        "gather_ns",
        "info",
        "later",
        "parts",
        "step",
        "waits",
        "weight",
    )

    def __init__(
        self,
        step: int,
        parts: Parts[B] | None = None,
        info: StepInfo | None = None,
        error: BaseException | None = None,
    ) -> None:
        self.step, self.parts, self.info, self.error = step, parts, info, error
        # Its reads still under way, found once: the consumer asks whether they
        # are ready at every step.
        self.later: list[Later[B]] = [
            cast("Later[B]", v)
            for shard in parts or ()
            for v in shard.values()
            if isinstance(v, Later)
        ]
        self.waits = bool(self.later)
        self.draw_ns = self.gather_ns = self.end_ns = 0
        # Measured steps over remote readers begun ahead: the consumer's wait
        # for their reads; -1 when not measured.
        self.fetch_ns = -1
        # The steps its measured times stand for; 0 when they are not measured.
        self.weight = 0

    def cancel(self) -> None:
        """Stops the reads still under way that can be stopped."""
        for v in self.later:
            v.cancel()

    def ready(self) -> bool:
        """Whether completing it would not wait."""
        later = self.later
        if len(later) == 1:  # one binding of one stream: without a generator
            return later[0].ready
        return self.error is not None or all(v.ready for v in later)


# A step's time in each of STAGES, in nanoseconds; -1 for a stage it did not have.
Times: TypeAlias = tuple[int, int, int, int]
NO_TIMES: Times = (-1, -1, -1, -1)


class Step(Generic[T]):
    """A finished step: its result or the exception it raised, and what it cost:
    its times (standing for `weight` steps, or not measured when 0) and its
    payload bytes when the gathers do not count them."""

    __slots__ = ("error", "nbytes", "times", "value", "weight")

    def __init__(
        self,
        value: T | None = None,
        error: BaseException | None = None,
        times: Times = NO_TIMES,
        nbytes: int = 0,
        weight: int = 0,
    ) -> None:
        self.value, self.error = value, error
        self.times, self.nbytes, self.weight = times, nbytes, weight
