"""A guard for tests of code that must not block on a FIFO: if the code under
test does block opening one (the bug), the guard opens the FIFO's write end after
a while, so that the open returns and the test fails on its assertions instead of
hanging the suite."""

from __future__ import annotations

import os
import threading
import time


class Unblock:
    """Used as ``with Unblock(fifo) as u: ...``; afterwards ``u.unblocked`` says
    whether a reader was found blocked on `fifo` (and released), and ``u.elapsed``
    how long the block took."""

    def __init__(self, fifo: str | os.PathLike[str], after: float = 8.0) -> None:
        self.fifo, self.after = os.fspath(fifo), after
        self.done = threading.Event()
        self.unblocked = False
        self.elapsed = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.after
        while not self.done.wait(0.2):
            if time.monotonic() < deadline:
                continue
            try:  # succeeds only while a reader has the FIFO open
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
                self.unblocked = True
            except OSError:
                pass

    def __enter__(self) -> Unblock:
        self.start = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start
        self.done.set()
        self.thread.join()
