"""Processes of one node sharing a block cache fetch each block once between
them, index blocks included: a process about to fetch a block claims it in the
cache directory, and the others wait for it and read it from the cache. A
claim's holder killed mid-fetch holds nobody up. tests/support/shared_cache_reader.py
is each process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import shared_cache_reader as child
from remote_servers import FaultProxy, RangeServer

from loaderx.zrecord import Dense

READER = Path(child.__file__)
BLOCK = 64 << 10


def write_store(root: Path, records: int = child.RECORDS, width: int = child.SHAPE[0]) -> int:
    """The store the children read, at root/s; returns its size in bytes."""
    with Dense.create(root / "s", np.uint8, (width,), codec="raw") as w:
        w.append(child.expected(np.arange(records), width))
    return sum(p.stat().st_size for p in (root / "s").iterdir())


def start(url: str, cache: Path, go: Path, width: int = child.SHAPE[0]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, str(READER), url, str(cache), str(BLOCK), str(go), str(width)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def finish(proc: subprocess.Popen[str]) -> dict[str, int]:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


# (records, bytes a record): mostly data; mostly index (24 bytes an entry, so
# 60000 records of 8 bytes hold 1.4 MB of index and 0.5 MB of data).
@pytest.mark.parametrize(("records", "width"), [(child.RECORDS, child.SHAPE[0]), (60_000, 8)])
def test_four_processes_sharing_a_cache_fetch_each_block_about_once(tmp_path, records, width):
    size = write_store(tmp_path / "srv", records, width)
    cache, go = tmp_path / "cache", tmp_path / "go"
    # 20 ms per request, so that the four processes' fetches of a block
    # overlap: without claims each would fetch it.
    with RangeServer(tmp_path / "srv") as server, FaultProxy(server.url, latency_ms=20) as proxy:
        procs = [start(f"{proxy.url}/s", cache, go, width) for _ in range(4)]
        opened = server.body_bytes()
        server.reset_counts()
        go.touch()
        got = [finish(p) for p in procs]
        served = server.body_bytes()
    # Each data and index block once: the reads fetched at most a tenth more
    # than the whole store. (The header, read by every open, was fetched
    # before the reads began.)
    assert served <= 1.1 * size, (served, size)
    assert sum(g["fetched"] for g in got) == opened + served
    # Every process read every record: what was not fetched came from the cache.
    data = records * width
    assert sum(g["from_cache"] for g in got) >= 4 * data - served
    assert not list(cache.rglob(".claim-*")), "every claim is removed by its holder"


def test_a_killed_fetcher_holds_nobody_up(tmp_path):
    write_store(tmp_path / "srv")
    cache, go = tmp_path / "cache", tmp_path / "go"
    with RangeServer(tmp_path / "srv") as server, FaultProxy(server.url) as proxy:
        stuck = start(f"{proxy.url}/s", cache, go)
        other = start(f"{server.url}/s", cache, tmp_path / "go-other")
        # The first process's reads now wait a minute at the proxy, holding
        # their claims; it is killed there.
        proxy.latency_ms = 60_000
        go.touch()
        deadline = time.monotonic() + 30
        while not list(cache.rglob(".claim-*")):
            assert time.monotonic() < deadline, "the first process claimed nothing"
            time.sleep(0.01)
        stuck.send_signal(signal.SIGKILL)
        stuck.wait()
        assert list(cache.rglob(".claim-*")), "the killed process's claim stays behind"
        began = time.monotonic()
        (tmp_path / "go-other").touch()
        got = finish(other)
        took = time.monotonic() - began
        proxy.latency_ms = 0
    # The claim of a process that is gone is taken over at once, not after
    # the 30 s a claim of an unknown holder is waited for.
    assert took < 10, took
    assert got["fetched"] > 0


def test_a_live_claim_is_waited_for_at_most_half_the_deadline(tmp_path):
    # Another live process's claims (pid 1 of this host: alive, and never
    # going to write the blocks) held a gather 30 s whatever its deadline,
    # then failed it without a request sent.
    import socket

    from remote_servers import HTTP_STORAGE_OPTIONS

    from loaderx.zrecord import Cache

    write_store(tmp_path / "srv")
    with RangeServer(tmp_path / "srv") as server:
        options = {**HTTP_STORAGE_OPTIONS, "deadline": 4}
        r = Dense.open(
            f"{server.url}/s",
            storage_options=options,
            cache=Cache(tmp_path / "c", block_bytes=BLOCK),
        )
        base = tmp_path / "c" / f"{r.header_checksum:016x}" / str(BLOCK)
        for name in ("index.bin", "data-000.bin"):
            (base / name).mkdir(parents=True)
            (base / name / ".claim-0").write_text(f"1@{socket.gethostname()}")
        began = time.monotonic()
        got = np.from_dlpack(r[[3]])
        took = time.monotonic() - began
    assert got.tolist() == child.expected(np.array([3]), child.SHAPE[0]).tolist()
    # Half of the 4 s deadline for the index block's claim, then half of what
    # is left for the data block's: about 3 s, each block then fetched here.
    assert 2.8 < took < 3.9, took
    assert sorted(p.name for p in base.rglob(".claim-*")) == [".claim-0", ".claim-0"]
