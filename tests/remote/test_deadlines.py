"""No open, read or upload waits on a silent server past its deadline: a server
that accepts connections and never answers costs `first_byte_timeout` per
attempt and `deadline` in all, a body that stops costs `request_timeout`, and a
refused connection fails at once until something has answered at the address.
(The defaults, a minute in all, are asserted by options.rs's unit tests; here
the same mechanism runs with short settings, timed.)"""

import socket
import threading
import time

import numpy as np
import pytest
from remote_servers import HOST, HTTP_STORAGE_OPTIONS, free_port

from conftest import host
from loaderx.errors import StorageError
from loaderx.zrecord import Dense, upload

VALUES = np.arange(3000, dtype=np.int64).reshape(1000, 3)
# Retries that wait little, so that the deadline, not the retries, ends a wait.
SHORT = {**HTTP_STORAGE_OPTIONS, "retry_backoff": 0.01, "retries": 100}


class SilentServer:
    """Accepts connections on 127.0.0.1 and never reads or answers them."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.sock.listen(128)
        self.url = f"http://{HOST}:{self.sock.getsockname()[1]}"
        self.held = []
        self.accepted = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            self.accepted += 1

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


def timed(f):
    t0 = time.monotonic()
    with pytest.raises(StorageError) as e:
        f()
    return time.monotonic() - t0, e.value


def test_an_open_against_a_silent_server_ends_at_its_deadline(silent):
    opts = {**SHORT, "deadline": 1.0, "first_byte_timeout": 0.3}
    took, e = timed(lambda: Dense.open(silent.url + "/s", storage_options=opts))
    assert 0.95 <= took < 1.8, took
    assert e.filename == silent.url + "/s/header.bin"
    assert "times; the last: no response began within" in str(e)
    assert e.strerror.endswith("(the deadline of 1.000 s, the storage option deadline, passed)")
    # Every attempt was a new request the server accepted: 3 or 4 of 0.3 s.
    assert silent.accepted >= 3


def test_each_attempt_waits_first_byte_timeout_for_a_response_to_begin(silent):
    opts = {**SHORT, "retries": 2, "first_byte_timeout": 0.2, "deadline": 30}
    took, e = timed(lambda: Dense.open(silent.url + "/s", storage_options=opts))
    assert 0.6 <= took < 1.4, took
    assert e.strerror.endswith("failed 3 times; the last: no response began within 0.200 s")


def test_an_upload_to_a_silent_server_ends_at_its_deadline(tmp_path, silent):
    with Dense.create(tmp_path / "s", np.int64, (3,), codec="raw") as w:
        w.append(VALUES)
    opts = {**SHORT, "deadline": 0.8, "first_byte_timeout": 0.25}
    took, e = timed(lambda: upload(tmp_path / "s", silent.url + "/up", storage_options=opts))
    assert 0.75 <= took < 1.6, took
    assert "the deadline of 0.800 s" in str(e)


@pytest.fixture
def opened(tmp_path, range_server, fault_proxy):
    with Dense.create(tmp_path / "s", np.int64, (3,), codec="raw", data_shards=2) as w:
        w.append(VALUES)

    def open_(**extra):
        return Dense.open(fault_proxy.url + "/s", storage_options={**SHORT, **extra})

    return open_


def test_a_gather_from_a_server_gone_silent_ends_at_its_deadline(opened, fault_proxy):
    r = opened(deadline=1.0, first_byte_timeout=0.3, coalesce_gap=0)
    assert host(r[[7, 900]]).tolist() == VALUES[[7, 900]].tolist()
    fault_proxy.latency_ms = 30_000  # no answer within any timeout a test waits out
    took, e = timed(lambda: r[np.arange(0, 1000, 50)])
    assert 0.95 <= took < 1.8, took
    assert "/s/data-" in e.filename
    assert "the deadline of 1.000 s" in str(e)
    # Each gather has a deadline of its own: the next one waits as long again.
    took, _ = timed(lambda: r[[3]])
    assert 0.95 <= took < 1.8, took
    fault_proxy.latency_ms = 0
    assert host(r[[3]]).tolist() == VALUES[[3]].tolist()


def test_a_body_that_stops_coming_fails_the_attempt_at_request_timeout(opened, fault_proxy):
    r = opened(request_timeout=0.4, first_byte_timeout=0.3, retries=1, coalesce_gap=0)
    fault_proxy.body_bytes_per_s = 100  # headers at once, then a trickle
    took, e = timed(lambda: r[:])
    assert 0.8 <= took < 1.6, took
    assert e.strerror.endswith("failed 2 times; the last: no complete response within 0.400 s")
    fault_proxy.body_bytes_per_s = None
    assert host(r[:]).tolist() == VALUES.tolist()


def test_a_refused_connection_fails_at_once_until_the_address_has_answered(tmp_path):
    url = f"http://{HOST}:{free_port()}/s"
    # The default retries and deadline: nothing listens, so nothing is retried.
    took, e = timed(lambda: Dense.open(url, storage_options=HTTP_STORAGE_OPTIONS))
    assert took < 0.5, took
    assert e.filename == url + "/header.bin"
    assert "failed: " in str(e)
    assert "refused" in str(e).lower()
    assert e.strerror.endswith("nothing has answered at this address yet, so it is not tried again")
    with Dense.create(tmp_path / "s", np.int64, (3,), codec="raw") as w:
        w.append(VALUES)
    took, e = timed(lambda: upload(tmp_path / "s", url, storage_options=HTTP_STORAGE_OPTIONS))
    assert took < 0.5, took
    assert "not tried again" in str(e)
