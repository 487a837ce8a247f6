"""A driver's heartbeat in its job prefix: one object rewritten every few
seconds while the job runs, so that ``loaderx.zrecord.clean`` of the root tells
a live job's prefix from one a killed driver left (its newest object ages)."""

from __future__ import annotations

import threading
import time
from typing import Any

from .. import _native


class Heartbeat:
    """Writes `url` now and then every `every` seconds from a daemon thread,
    until ``stop``."""

    def __init__(self, url: str, options: dict[str, Any], every: float) -> None:
        self._url = url
        self._options = options
        self._every = every
        self._stop = threading.Event()
        # The first beat goes before any task runs, and its failure is the
        # job's: a root the driver cannot write is no place to run one.
        self._beat()
        self._thread = threading.Thread(target=self._run, name="loaderx-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        _native.put_object(self._url, f"{time.time():.3f}\n".encode(), self._options)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._beat()
            except Exception:  # noqa: BLE001
                # A missed beat only makes the prefix look older; the next one
                # may land, and the job itself goes on.
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
