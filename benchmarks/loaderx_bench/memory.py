"""Process memory: putting it in the same state before a measurement, and measuring
it during one (the PSS of a process tree, the peak RSS of a process)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from loaderx_bench.units import MIB


def prefault(nbytes: int) -> None:
    """Touches and frees `nbytes` of memory (plus some). This VM hands idle memory
    back to its host, and the first touch after that costs a host page fault, so a
    writer that runs first into fresh page cache would pay for everyone; after this
    the memory a write needs is already the guest's."""
    scratch = np.ones(nbytes + 256 * MIB, np.uint8)
    del scratch


def warm_array(a: np.ndarray) -> None:
    """Touches every page of a (memory-mapped) array."""
    flat = np.asarray(a).reshape(-1).view(np.uint8)
    buf = np.empty(8 << 20, dtype=np.uint8)
    for at in range(0, len(flat), len(buf)):
        part = flat[at : at + len(buf)]
        np.copyto(buf[: len(part)], part)


def vm_hwm_bytes() -> int:
    """Peak resident set size of this process so far."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# ---- process-tree memory ------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


# The smaps_rollup fields summed over the tree: Pss = Pss_Anon + Pss_File + Pss_Shmem.
# Rss, summed the same way, counts a page once per process that maps it.
PSS_FIELDS = ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem", "Rss")


def _pss_kib(pid: int) -> dict[str, int]:
    out = dict.fromkeys(PSS_FIELDS, 0)
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in out:
                out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def tree_pss_kib() -> dict[str, int]:
    """PSS of this process and all its descendants, in KiB, by kind of page, and
    the sum of their RSS."""
    pids, total = [os.getpid()], dict.fromkeys(PSS_FIELDS, 0)
    while pids:
        p = pids.pop()
        for k, v in _pss_kib(p).items():
            total[k] += v
        pids += _children(p)
    return total


class PeakMemory:
    """Samples the PSS of this process tree every 20 ms and keeps the sample with
    the highest total (so its parts add up to the peak), and the highest RSS sum."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        now = tree_pss_kib()
        if now["Pss"] > self.peak.get("Pss", -1):
            self.peak = now
        self.peak_rss = max(self.peak_rss, now["Rss"])

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    def __enter__(self) -> PeakMemory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
