"""How fast this machine hands a process memory it has not used before.

A remote reader keeps the blocks it reads in its own memory and writes the
blocks it fetches to the cache's files, whose pages are new page cache; a local
store reads pages the page cache holds already. Where the kernel gives free
memory back to a virtual machine's host as soon as it is freed (free page
reporting, as a balloon device does), each page touched for the first time is
the host's to find and zero, and costs far more than a copy. This script times,
in ``--rounds`` rounds of ``--mib`` MiB each (every round on memory just freed
by the round before):

* **fresh, 4 KiB pages**: an anonymous mapping (huge pages refused) written one
  byte per 4 KiB page;
* **fresh, 2 MiB pages**: an anonymous mapping aligned to 2 MiB with huge
  pages asked for, written one byte per 2 MiB (its slowest single touch is
  printed too);
* **resident, copied**: the first mapping, touched already, copied into the
  second (NumPy's copy, one thread): what a copy costs once the memory is there;
* **page cache, written**: a file of the same size written in 1 MiB writes
  (new page cache), then **page cache, read**: read back into the resident
  buffer (pages the page cache holds).

Printed first: the kernel's free page reporting settings and how much it has
reported, where ``/sys/module/page_reporting/parameters`` exists.

Usage: python scripts/bench_fresh_memory.py [--mib 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loaderx_bench.machine import one_bench_at_a_time
from loaderx_bench.report import finish_results, start_results, table

PAGE = 4 << 10
HUGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_NOHUGEPAGE = 15
REPORTING = Path("/sys/module/page_reporting/parameters")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def reporting() -> str:
    """The free page reporting parameters, one line, or why there are none."""
    if not REPORTING.is_dir():
        return "free page reporting: no /sys/module/page_reporting here"
    values = [f"{p.name}={p.read_text().strip()}" for p in sorted(REPORTING.iterdir())]
    return "free page reporting: " + ", ".join(values)


class Mapping:
    """``size`` bytes of fresh anonymous memory at a 2 MiB-aligned address,
    with huge pages asked for or refused."""

    def __init__(self, size: int, huge: bool) -> None:
        self.raw = mmap.mmap(-1, size + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.raw))
        self.offset = -base % HUGE
        self.size = size
        advice = MADV_HUGEPAGE if huge else MADV_NOHUGEPAGE
        if _libc.madvise(base + self.offset, size, advice) != 0:
            raise OSError(ctypes.get_errno(), "madvise failed")
        self.array = np.frombuffer(self.raw, np.uint8, size, self.offset)

    def close(self) -> None:
        del self.array
        self.raw.close()


def touch(m: Mapping, stride: int) -> tuple[float, float]:
    """Writes one byte every `stride` bytes: seconds in all, and the slowest touch."""
    slowest = 0.0
    started = time.perf_counter()
    for at in range(0, m.size, stride):
        t = time.perf_counter()
        m.array[at] = 1
        slowest = max(slowest, time.perf_counter() - t)
    return time.perf_counter() - started, slowest


def page_cache(path: Path, src: np.ndarray, dst: np.ndarray) -> tuple[float, float]:
    """Seconds to write `src` to a new file at `path` (1 MiB writes), and to read
    it back into `dst`."""
    chunk = 1 << 20
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for at in range(0, len(src), chunk):
            os.write(fd, memoryview(src[at : at + chunk]))
        wrote = time.perf_counter() - started
    finally:
        os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        started = time.perf_counter()
        done = 0
        while done < len(dst):
            n = os.readv(fd, [memoryview(dst[done:])])
            if n == 0:
                raise AssertionError(f"{path} is shorter than it was written")
            done += n
        read = time.perf_counter() - started
    finally:
        os.close(fd)
    if not np.array_equal(src, dst):
        raise AssertionError("the file read back differs from what was written")
    path.unlink()
    return wrote, read


def one_round(size: int, work: Path) -> dict[str, tuple[float, float]]:
    small = Mapping(size, huge=False)
    big = Mapping(size, huge=True)
    try:
        got: dict[str, tuple[float, float]] = {}
        got["fresh, 4 KiB pages"] = touch(small, PAGE)
        got["fresh, 2 MiB pages"] = touch(big, HUGE)
        small.array[:] = np.arange(size, dtype=np.uint64).astype(np.uint8)
        started = time.perf_counter()
        np.copyto(big.array, small.array)
        got["resident, copied"] = (time.perf_counter() - started, 0.0)
        if not np.array_equal(small.array, big.array):
            raise AssertionError("the copy differs from its source")
        wrote, read = page_cache(work / "file", small.array, big.array)
        got["page cache, written"] = (wrote, 0.0)
        got["page cache, read"] = (read, 0.0)
        return got
    finally:
        small.close()
        big.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="MiB per measure")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each on fresh memory")
    ap.add_argument("--dir", help="where the file goes (default: a new temporary folder)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    if args.mib < 2 or args.rounds < 1:
        ap.error("--mib must be at least 2 and --rounds at least 1")
    size = (args.mib << 20) // HUGE * HUGE
    results = start_results("bench_fresh_memory", mib=args.mib, rounds=args.rounds)
    started = time.perf_counter()
    print(reporting())
    rounds: list[dict[str, tuple[float, float]]] = []
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(dir=args.dir) as work:
        for _ in range(args.rounds):
            rounds.append(one_round(size, Path(work)))
    mib = size / (1 << 20)
    rows = []
    for what in rounds[0]:
        secs = [r[what][0] for r in rounds]
        slowest = max(r[what][1] for r in rounds)
        rows.append(
            [
                what,
                f"{mib:.0f}",
                " ".join(f"{s:.3f}" for s in secs),
                f"{mib / statistics.median(secs):.0f}",
                f"{slowest * 1e3:.2f}" if slowest else "",
            ]
        )
    headers = ["memory", "MiB", "seconds per round", "MiB/s (median)", "slowest touch ms"]
    print(table(headers, rows))
    results["rows"] = rows
    finish_results(results, started, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
