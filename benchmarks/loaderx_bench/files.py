"""A store's files: their size on disk, making them durable, putting them in the
page cache the same way for every backend, removing them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def disk_bytes(path: str | os.PathLike[str]) -> int:
    """Allocated bytes of a file, or of every file under a directory."""
    p = Path(path)
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    return sum(f.stat().st_blocks * 512 for f in files)


def warm_files(path: Path) -> None:
    """Drops every file of the store from the page cache, then reads it back once,
    so that the timed gathers run on a warm cache that the kernel's readahead
    filled the same way for every backend. Left as its writer filled it, the cache
    would hold large folios (mapped with 2 MiB pages, few TLB misses) for a writer
    that writes in big pieces, like loaderx, and 4 KiB pages for one that writes
    in small ones, like ``np.save``, and the gathers would measure that too."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while fh.read(8 << 20):
                pass


def sync_tree(path: str | os.PathLike[str]) -> None:
    """fsyncs every file and directory of a store, so that write times run until
    the store is durable for every backend alike (loaderx's close() fsyncs; most
    other writers leave their files dirty in the page cache)."""
    path = Path(path)
    for p in [path] if path.is_file() else [path, *sorted(path.rglob("*"))]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()
