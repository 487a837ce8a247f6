"""Servers fast enough not to be a benchmark's ceiling: nginx for ``http://`` (byte
ranges, ETags and Last-Modified, as Debian packages it) and s3s-fs for ``s3://`` (an
S3-compatible server over a directory, in Rust). Python servers such as the tests'
own (``tests/support/remote_servers.py``) or moto use more CPU per request than
the reader they serve, so what they measure is themselves.

Each starts on 127.0.0.1, or inside a network namespace made for it
(``Namespace``), and stops on ``stop()`` or at the end of a ``with`` block. A
missing binary is a ``ServerMissing`` that says how to install it:

- nginx: ``apt-get install -y nginx`` (Debian);
- s3s-fs: 0.14.1 with TCP_NODELAY on its connections, built by
  ``bash scripts/build_s3s_fs.sh`` as ``s3s-fs-nodelay`` (on ``PATH`` or in
  ``~/.cargo/bin``); as published it leaves Nagle's algorithm on, which can
  hold an answer's body until the client's delayed acknowledgement (up to 40
  ms). Both come with ``bash scripts/setup_bench.sh``.

``Nginx`` counts what it served from its access log: requests and response body
bytes, for the fetch amplification a benchmark reports. ``Namespace`` adds a round
trip of latency with ``tc netem`` on the namespace's end of a veth pair, never on
the machine's loopback; a kernel without the netem queueing discipline is a
``ServerMissing`` too.

Only the standard library: worker processes of other loaderx builds import it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
# The access log's fields: method, URI, status and body bytes sent.
_LOG_FORMAT = "$request_method $uri $status $body_bytes_sent"


class ServerMissing(RuntimeError):
    """A server's binary (or a kernel feature it needs) is not on this machine."""


def free_port(host: str = HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_for_port(host: str, port: int, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"the server exited with {proc.returncode}: {tail.strip()}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"nothing answered at {host}:{port} within {timeout:g} s")


def _binary(name: str, how: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path.home() / ".cargo" / "bin"))
    if found is None:
        raise ServerMissing(f"{name} is not installed: {how}")
    return found


class _Process:
    """A server in a child process of its own (its own process group, so that
    stopping it stops whatever it started), optionally in a network namespace."""

    start_timeout = 20.0

    def __init__(self, netns: Namespace | None) -> None:
        self.netns = netns
        self.host = netns.inside if netns is not None else HOST
        self.port = free_port() if netns is None else netns.free_port()
        self.home = Path(tempfile.mkdtemp(prefix=f"loaderx-{type(self).__name__.lower()}-"))
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("already running")
        cmd = self.command()
        if self.netns is not None:
            cmd = ["ip", "netns", "exec", self.netns.name, *cmd]
        log = self.home / "server.log"
        with open(log, "ab") as out:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        try:
            _wait_for_port(self.host, self.port, self._proc, log, self.start_timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)

    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Debian's echo module (libnginx-mod-http-echo, which the nginx package pulls in):
# its echo_sleep waits on a timer, so a delayed request holds no worker.
ECHO_MODULE = Path("/usr/share/nginx/modules/ngx_http_echo_module.so")


class Nginx(_Process):
    """nginx serving the directory ``root`` read-only at ``url`` (``url + "/s"`` is
    ``root / "s"``), with ``workers`` worker processes. ``counts()`` gives the
    requests and response body bytes it has logged since ``reset_counts()``.

    ``delay_ms`` makes nginx wait that long before answering each request (with
    the echo module's timer), a round trip's latency without netem or a proxy.
    With ``upstream`` (a base URL, such as an ``S3sFs``'s) nginx forwards every
    request there instead of serving ``root``, the Host header unchanged (so S3
    signatures stay valid): a delay in front of a server that has none."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        workers: int = 1,
        netns: Namespace | None = None,
        delay_ms: float = 0.0,
        upstream: str | None = None,
    ) -> None:
        self.binary = _binary("nginx", "apt-get install -y nginx")
        self.upstream = upstream
        if delay_ms > 0 and not ECHO_MODULE.exists():
            raise ServerMissing(
                f"nginx's echo module ({ECHO_MODULE}) is not installed, so nginx cannot "
                "delay its answers: apt-get install -y libnginx-mod-http-echo"
            )
        super().__init__(netns)
        self.root = Path(root).resolve()
        self.workers = workers
        self.delay_ms = delay_ms
        self.access_log = self.home / "access.log"
        self._log_offset = 0

    def command(self) -> list[str]:
        conf = self.home / "nginx.conf"
        temp = self.home / "temp"
        temp.mkdir(exist_ok=True)
        # Run as the caller: the default user (nobody) may not read a private
        # temporary directory, and as root nginx would otherwise switch to it.
        user = "user root root;" if os.geteuid() == 0 else ""
        serve = "limit_except GET { deny all; }"
        upstream = ""
        if self.upstream is not None:
            # Connections to the upstream are kept open and reused: without a
            # pool nginx connects anew for every request, and a first batch of
            # hundreds of requests at once took s3s-fs ten times as long.
            address = self.upstream.removeprefix("http://").rstrip("/")
            upstream = f"upstream origin {{ server {address}; keepalive 1024; }}"
            serve = (
                "proxy_pass http://origin; proxy_set_header Host $http_host; "
                'proxy_http_version 1.1; proxy_set_header Connection ""; '
                "proxy_request_buffering off; proxy_buffering off;"
            )
        module, location = "", f"location / {{ {serve} }}"
        if self.delay_ms > 0:
            module = f"load_module {ECHO_MODULE};"
            location = (
                f"location / {{ echo_sleep {self.delay_ms / 1000:.3f}; echo_exec @file; }}\n"
                f"        location @file {{ {serve} }}"
            )
        conf.write_text(
            f"""{user}
{module}
daemon off;
worker_processes {self.workers};
pid {self.home / "nginx.pid"};
error_log {self.home / "error.log"} warn;
events {{ worker_connections 4096; }}
http {{
    types {{ }}
    default_type application/octet-stream;
    log_format counted '{_LOG_FORMAT}';
    access_log {self.access_log} counted;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    client_max_body_size 0;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 75s;
    {upstream}
    server {{
        listen {self.host}:{self.port} reuseport backlog=4096;
        root {self.root};
        {location}
    }}
}}
"""
        )
        return [
            self.binary,
            "-e",
            str(self.home / "error.log"),
            "-p",
            str(self.home),
            "-c",
            str(conf),
        ]

    def _lines(self) -> list[str]:
        if not self.access_log.exists():
            return []
        with open(self.access_log, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace").splitlines()

    def counts(self) -> dict[str, int]:
        """Requests logged and response body bytes sent since the last reset."""
        requests = body = 0
        for line in self._lines():
            fields = line.split()
            if len(fields) == 4 and fields[3].isdigit():
                requests += 1
                body += int(fields[3])
        return {"requests": requests, "body_bytes": body}

    def reset_counts(self) -> None:
        self._log_offset = self.access_log.stat().st_size if self.access_log.exists() else 0


class S3sFs(_Process):
    """s3s-fs serving the directory ``root`` as S3: each directory directly in it
    is a bucket, and the files under it its objects (``root/b/k`` is
    ``s3://b/k``). ``storage_options()`` is what object_store needs to reach it."""

    ACCESS_KEY = "loaderx"
    SECRET_KEY = "loaderx-secret"
    REGION = "us-east-1"

    def __init__(self, root: str | os.PathLike[str], netns: Namespace | None = None) -> None:
        self.binary = _binary("s3s-fs-nodelay", "bash scripts/build_s3s_fs.sh")
        super().__init__(netns)
        self.root = Path(root).resolve()

    def command(self) -> list[str]:
        return [
            self.binary,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--access-key",
            self.ACCESS_KEY,
            "--secret-key",
            self.SECRET_KEY,
            str(self.root),
        ]

    def storage_options(self) -> dict[str, str]:
        return {
            "aws_endpoint": self.url,
            "aws_allow_http": "true",
            "aws_region": self.REGION,
            "aws_access_key_id": self.ACCESS_KEY,
            "aws_secret_access_key": self.SECRET_KEY,
            "aws_virtual_hosted_style_request": "false",
        }


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *args] if netns is None else ["ip", "-n", netns, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")


class Namespace:
    """A network namespace of its own, joined to this one by a veth pair, with
    ``delay_ms`` of latency each way added by ``tc netem`` on the namespace's end
    (so a request's round trip gains twice that). The pair's two addresses are in
    a /30 of their own (``outside``, ``inside``); only this machine's processes
    reach them. Made by ``start()`` (or ``with``), removed by ``stop()``. Needs
    root (``ip netns add``)."""

    def __init__(self, delay_ms: float = 0.0, subnet: int = 0) -> None:
        tag = f"{os.getpid() % 100000}{subnet}"
        self.name = f"loaderx-{tag}"
        self.outer_dev, self.inner_dev = f"lx{tag}a", f"lx{tag}b"
        # 198.18.0.0/15 is set aside for benchmarks between devices (RFC 2544).
        base = 4 * (subnet % 64)
        self.outside, self.inside = f"198.18.0.{base + 1}", f"198.18.0.{base + 2}"
        self.delay_ms = delay_ms
        self._made = False
        self._ports = 0

    def free_port(self) -> int:
        """A port no other server of this namespace listens on: nothing else runs
        in it."""
        self._ports += 1
        return 18000 + self._ports

    def start(self) -> None:
        if shutil.which("ip") is None:
            raise ServerMissing("ip (iproute2) is not installed: apt-get install -y iproute2")
        _ip("netns", "add", self.name)
        self._made = True
        try:
            _ip("link", "add", self.outer_dev, "type", "veth", "peer", "name", self.inner_dev)
            _ip("link", "set", self.inner_dev, "netns", self.name)
            _ip("addr", "add", f"{self.outside}/30", "dev", self.outer_dev)
            _ip("link", "set", self.outer_dev, "up")
            _ip("addr", "add", f"{self.inside}/30", "dev", self.inner_dev, netns=self.name)
            _ip("link", "set", self.inner_dev, "up", netns=self.name)
            _ip("link", "set", "lo", "up", netns=self.name)
            if self.delay_ms > 0:
                self._netem()
        except BaseException:
            self.stop()
            raise

    def _netem(self) -> None:
        cmd = ["ip", "netns", "exec", self.name, "tc", "qdisc", "add", "dev", self.inner_dev]
        cmd += ["root", "netem", "delay", f"{self.delay_ms:g}ms", "limit", "100000"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            why = proc.stderr.strip()
            if "unknown" in why.lower():
                raise ServerMissing(
                    "this kernel has no netem queueing discipline (sch_netem), so no "
                    f"latency can be added on a veth pair: {why}"
                )
            raise RuntimeError(f"{' '.join(cmd)} failed: {why}")

    def stop(self) -> None:
        if not self._made:
            return
        self._made = False
        # Removing the namespace removes its end of the pair, and so the pair.
        subprocess.run(["ip", "link", "del", self.outer_dev], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
