"""Progress and failure messages of a dataset preparation."""

from __future__ import annotations

import sys
import time


def log(msg: str) -> None:
    print(msg, flush=True)


class Timer:
    """Wall-clock timer that prints labelled lap times."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.last = self.start

    def lap(self, label: str) -> float:
        now = time.perf_counter()
        dt = now - self.last
        self.last = now
        log(f"  [{dt:7.1f}s] {label}")
        return dt

    def total(self) -> float:
        return time.perf_counter() - self.start


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)
