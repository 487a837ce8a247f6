"""Progress of long tasks: ``verify``, ``convert``, ``concat`` and the command line.

Every function that can run for minutes takes a ``progress`` argument and reports
through this one module::

    from loaderx import progress

    with progress.task("verify tokens", total=n_bytes, unit="bytes", progress=arg) as p:
        for chunk in chunks:
            work(chunk)
            p.advance(len(chunk))

``progress`` (``arg`` above) is one of:

* ``False`` or ``None``: nothing is reported.
* ``True``: a progress bar on stderr with the amount done, the total, the rate and
  the time left, only when stderr is a terminal; silent when it is not (a log
  file, a pipe, CI), so logs never fill with bars. The bar is tqdm's when tqdm is
  installed (the ``cli`` and ``converter`` extras install it; the library itself
  needs only NumPy). Without tqdm, a plain line
  ``TASK: DONE / TOTAL UNIT (PCT, RATE, ETA)`` is written to stderr at most every
  ``PLAIN_INTERVAL_S`` seconds and once at the end.
* a callable: called with a :class:`ProgressEvent` once at the start (``done=0``),
  after every step and once at the end (``finished=True``), whatever stderr is;
  nothing is printed. An exception it raises propagates and stops the task.

Units are ``"bytes"``, ``"rows"`` or ``"records"``; ``total`` is ``None`` when it
is not known in advance. A task counted in rows or records may also count the
bytes they hold (``p.advance(rows, nbytes=...)``): the bar and the lines then show
the bytes and their rate too, and events carry them in ``nbytes``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["PLAIN_INTERVAL_S", "ProgressArg", "ProgressEvent", "Task", "task"]

Unit: TypeAlias = Literal["bytes", "rows", "records"]
_UNITS = ("bytes", "rows", "records")

# Seconds between two plain progress lines (without tqdm).
PLAIN_INTERVAL_S = 2.0


@dataclass(frozen=True)
class ProgressEvent:
    """Where a task stands: `done` of `total` `unit` (``total`` None when not
    known); ``finished`` on the last event of a task that completed; ``nbytes``
    the bytes done, for a task in rows or records that counts them (else 0)."""

    task: str
    unit: Unit
    done: int
    total: int | None
    finished: bool = False
    nbytes: int = 0


ProgressArg: TypeAlias = "bool | Callable[[ProgressEvent], object] | None"


class _Sink(Protocol):
    def step(self, done: int, nbytes: int) -> None: ...
    def close(self, done: int, nbytes: int, finished: bool) -> None: ...


class _Silent:
    def step(self, done: int, nbytes: int) -> None:
        pass

    def close(self, done: int, nbytes: int, finished: bool) -> None:
        pass


class _Callback:
    def __init__(
        self, fn: Callable[[ProgressEvent], object], name: str, unit: Unit, total: int | None
    ) -> None:
        self._fn = fn
        self._name = name
        self._unit: Unit = unit
        self._total = total
        fn(ProgressEvent(name, unit, 0, total))

    def step(self, done: int, nbytes: int) -> None:
        self._fn(ProgressEvent(self._name, self._unit, done, self._total, nbytes=nbytes))

    def close(self, done: int, nbytes: int, finished: bool) -> None:
        if finished:
            self._fn(ProgressEvent(self._name, self._unit, done, self._total, True, nbytes))


def _amount(n: float, unit: Unit) -> str:
    if unit != "bytes":
        return f"{n:,.0f} {unit}"
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:,.1f} {name}"
    return f"{n:,.0f} B"


def _duration(s: float) -> str:
    s = int(s)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class _Plain:
    """Periodic lines on stderr, for a terminal without tqdm."""

    def __init__(self, name: str, unit: Unit, total: int | None) -> None:
        self._name = name
        self._unit: Unit = unit
        self._total = total
        self._start = self._last = time.monotonic()

    def _line(self, done: int, nbytes: int, now: float) -> None:
        elapsed = max(now - self._start, 1e-9)
        rate = done / elapsed
        parts = [f"{_amount(rate, self._unit)}/s"]
        if nbytes:
            parts.append(f"{_amount(nbytes, 'bytes')}, {_amount(nbytes / elapsed, 'bytes')}/s")
        amount = _amount(done, self._unit)
        if self._total is not None:
            amount += f" / {_amount(self._total, self._unit)}"
            if self._total > 0:
                parts.insert(0, f"{100 * done / self._total:.0f}%")
            if rate > 0 and done < self._total:
                parts.append(f"ETA {_duration((self._total - done) / rate)}")
        print(f"{self._name}: {amount} ({', '.join(parts)})", file=sys.stderr, flush=True)

    def step(self, done: int, nbytes: int) -> None:
        now = time.monotonic()
        if now - self._last >= PLAIN_INTERVAL_S:
            self._last = now
            self._line(done, nbytes, now)

    def close(self, done: int, nbytes: int, finished: bool) -> None:
        self._line(done, nbytes, time.monotonic())


class _Tqdm:
    def __init__(self, name: str, unit: Unit, total: int | None) -> None:
        from tqdm import tqdm

        self._done = 0
        self._start = time.monotonic()
        if unit == "bytes":
            self._bar = tqdm(
                total=total,
                desc=name,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=sys.stderr,
            )
        else:
            self._bar = tqdm(
                total=total, desc=name, unit=f" {unit}", unit_scale=True, file=sys.stderr
            )

    def step(self, done: int, nbytes: int) -> None:
        if nbytes:
            rate = nbytes / max(time.monotonic() - self._start, 1e-9)
            self._bar.set_postfix_str(
                f"{_amount(nbytes, 'bytes')}, {_amount(rate, 'bytes')}/s", refresh=False
            )
        self._bar.update(done - self._done)
        self._done = done

    def close(self, done: int, nbytes: int, finished: bool) -> None:
        self.step(done, nbytes)
        self._bar.close()


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def _sink(progress: ProgressArg, name: str, unit: Unit, total: int | None) -> _Sink:
    if progress is None or progress is False:
        return _Silent()
    if progress is True:
        if not _stderr_is_terminal():
            return _Silent()
        try:
            return _Tqdm(name, unit, total)
        except ImportError:
            return _Plain(name, unit, total)
    if callable(progress):
        return _Callback(progress, name, unit, total)
    raise TypeError(
        f"progress must be a bool, None or a callable taking a ProgressEvent, "
        f"got {type(progress).__name__}"
    )


class Task:
    """One task's progress; made by :func:`task`. Use it as a context manager, or
    call :meth:`close` when done."""

    def __init__(self, name: str, total: int | None, unit: Unit, progress: ProgressArg) -> None:
        if unit not in _UNITS:
            raise ValueError(f"unit must be one of {_UNITS}, got {unit!r}")
        self.done = 0
        self.nbytes = 0
        self._closed = False
        self._sink = _sink(progress, name, unit, total)

    def advance(self, n: int, *, nbytes: int = 0) -> None:
        """Counts `n` more units done, holding `nbytes` more bytes."""
        self.done += n
        self.nbytes += nbytes
        self._sink.step(self.done, self.nbytes)

    def close(self, finished: bool = True) -> None:
        """Ends the task; `finished` says whether it completed (a callback then
        gets its ``finished`` event)."""
        if not self._closed:
            self._closed = True
            self._sink.close(self.done, self.nbytes, finished)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(finished=exc_type is None)


def task(name: str, *, total: int | None, unit: Unit, progress: ProgressArg) -> Task:
    """Starts reporting the progress of task `name` of `total` `unit` as
    `progress` says (see the module's documentation)."""
    return Task(name, total, unit, progress)
