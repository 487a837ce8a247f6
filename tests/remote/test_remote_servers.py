"""The servers the remote-store tests use (tests/support/remote_servers.py) behave as documented:
exact bytes for byte ranges, the faults and latency the proxy is told to add, restarts
on the same port. Plain http.client / urllib clients, so that a failure here points at
the servers, not at the library."""

import http.client
import statistics
import threading
import time
import urllib.request

import pytest
from remote_servers import FaultProxy, parse_range

DATA = bytes(range(256)) * 40  # 10240 bytes, every offset distinguishable mod 256


@pytest.fixture
def served(tmp_path, range_server):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.bin").write_bytes(DATA)
    return range_server


def get(conn, path, headers=None, method="GET"):
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    return r, r.read()


@pytest.mark.parametrize(
    "header,size,expected",
    [
        ("bytes=0-0", 10, (0, 0)),
        ("bytes=2-5", 10, (2, 5)),
        ("bytes=2-", 10, (2, 9)),
        ("bytes=-3", 10, (7, 9)),
        ("bytes=-30", 10, (0, 9)),
        ("bytes=5-100", 10, (5, 9)),
        ("bytes=10-", 10, "unsatisfiable"),
        ("bytes=10-12", 10, "unsatisfiable"),
        ("bytes=-0", 10, "unsatisfiable"),
        ("bytes=0-", 0, "unsatisfiable"),
        ("bytes=5-2", 10, None),
        ("bytes=0-1,4-5", 10, None),
        ("items=0-1", 10, None),
        ("bytes=x-1", 10, None),
    ],
)
def test_parse_range(header, size, expected):
    assert parse_range(header, size) == expected


def test_range_server_serves_exact_bytes(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    r, body = get(conn, "/d/f.bin")
    assert (r.status, body) == (200, DATA)
    assert r.getheader("Content-Length") == str(len(DATA))
    etag, last_modified = r.getheader("ETag"), r.getheader("Last-Modified")
    assert etag and last_modified
    # Every reply below travels on the same kept-alive connection.
    for header, (a, b) in [
        ("bytes=100-355", (100, 355)),
        ("bytes=10000-", (10000, 10239)),
        ("bytes=-17", (10223, 10239)),
        ("bytes=10230-20000", (10230, 10239)),
    ]:
        r, body = get(conn, "/d/f.bin", {"Range": header})
        assert r.status == 206
        assert body == DATA[a : b + 1]
        assert r.getheader("Content-Range") == f"bytes {a}-{b}/{len(DATA)}"
        assert r.getheader("Content-Length") == str(b + 1 - a)
    r, body = get(conn, "/d/f.bin", {"Range": "bytes=10240-"})
    assert (r.status, body, r.getheader("Content-Range")) == (416, b"", "bytes */10240")
    r, body = get(conn, "/d/f.bin", method="HEAD")
    assert (r.status, body, r.getheader("Content-Length")) == (200, b"", "10240")
    r, _ = get(conn, "/d/f.bin", {"If-Match": '"other"', "Range": "bytes=0-1"})
    assert r.status == 412
    r, body = get(conn, "/d/f.bin", {"If-Match": etag, "Range": "bytes=0-1"})
    assert (r.status, body) == (206, DATA[:2])
    r, _ = get(conn, "/d/f.bin", {"If-None-Match": etag})
    assert r.status == 304
    for missing in ["/d/nope", "/d", "/", "../d/f.bin"]:
        r, _ = get(conn, missing)
        assert r.status == 404, missing
    assert served.requests("/d/f.bin") == 10
    assert served.requests() == 14
    # Bodies: the whole file, four ranges, If-Match's two bytes.
    assert served.body_bytes() == len(DATA) + 256 + 240 + 17 + 10 + 2
    assert served.log()[1] == ("GET", "/d/f.bin", "bytes=100-355")
    served.reset_counts()
    assert (served.requests(), served.body_bytes()) == (0, 0)


def test_range_server_restarts_on_its_port(served):
    port = served.port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    assert get(conn, "/d/f.bin", {"Range": "bytes=0-3"})[1] == DATA[:4]
    served.stop()
    with pytest.raises(ConnectionRefusedError):
        get(http.client.HTTPConnection("127.0.0.1", port, timeout=10), "/d/f.bin")
    # The kept-alive connection was cut with the server.
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        get(conn, "/d/f.bin")
    served.start()
    assert served.port == port
    with urllib.request.urlopen(served.url + "/d/f.bin", timeout=10) as r:
        assert r.read() == DATA


def test_proxy_passes_requests_through(served, fault_proxy):
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    r, body = get(conn, "/d/f.bin", {"Range": "bytes=7-1030"})
    assert (r.status, body) == (206, DATA[7:1031])
    assert r.getheader("Content-Range") == "bytes 7-1030/10240"
    r, body = get(conn, "/d/f.bin", method="HEAD")
    assert (r.status, body, r.getheader("Content-Length")) == (200, b"", "10240")
    r, body = get(conn, "/d/missing")
    assert r.status == 404
    r, body = get(conn, "/d/f.bin")
    assert (r.status, body) == (200, DATA)
    assert fault_proxy.requests("/d/f.bin") == served.requests("/d/f.bin") == 3
    assert fault_proxy.body_bytes() == served.body_bytes() == 1024 + len(DATA)


def test_proxy_fails_the_next_requests(served, fault_proxy):
    fault_proxy.fail_next(2, 503)
    fault_proxy.fail_next(1, 500)
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    statuses = [get(conn, "/d/f.bin", {"Range": "bytes=0-9"})[0].status for _ in range(4)]
    assert statuses == [503, 503, 500, 206]
    assert fault_proxy.pending_faults() == 0
    assert served.requests() == 1


def test_proxy_truncates_the_body(served, fault_proxy):
    fault_proxy.truncate_next(1)
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    conn.request("GET", "/d/f.bin", headers={"Range": "bytes=0-999"})
    r = conn.getresponse()
    assert (r.status, r.getheader("Content-Length")) == (206, "1000")
    with pytest.raises(http.client.IncompleteRead) as e:
        r.read()
    assert e.value.partial == DATA[:500]
    with urllib.request.urlopen(fault_proxy.url + "/d/f.bin", timeout=10) as r:
        assert r.read() == DATA


def test_proxy_resets_the_connection(served, fault_proxy):
    fault_proxy.reset_next(1)
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    with pytest.raises(ConnectionResetError):
        get(conn, "/d/f.bin")
    assert served.requests() == 0
    with urllib.request.urlopen(fault_proxy.url + "/d/f.bin", timeout=10) as r:
        assert r.read() == DATA


def test_proxy_adds_latency_concurrently(served, fault_proxy):
    def timed(conn):
        t = time.perf_counter()
        assert get(conn, "/d/f.bin", {"Range": "bytes=0-99"})[1] == DATA[:100]
        return time.perf_counter() - t

    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    base = statistics.median(timed(conn) for _ in range(5))
    fault_proxy.latency_ms = 60
    delayed = [timed(conn) for _ in range(5)]
    assert min(delayed) >= 0.060
    # Generous: the machine running the tests may be busy.
    assert statistics.median(delayed) < 0.060 + base + 0.1
    # Thirty-two clients connecting at once each wait their 60 ms in parallel: not one
    # after another (about 2 s), nor after a dropped SYN's one-second retransmission.
    results = []
    barrier = threading.Barrier(32)

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
        barrier.wait()
        results.append(timed(conn))

    threads = [threading.Thread(target=client) for _ in range(32)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 32
    assert time.perf_counter() - t < 0.9


def test_proxy_slow_body(served, fault_proxy):
    fault_proxy.body_bytes_per_s = 40_000
    t = time.perf_counter()
    with urllib.request.urlopen(fault_proxy.url + "/d/f.bin", timeout=10) as r:
        assert r.read() == DATA
    assert time.perf_counter() - t >= len(DATA) / 40_000 * 0.9


def test_proxy_survives_an_upstream_restart(served, fault_proxy):
    conn = http.client.HTTPConnection("127.0.0.1", fault_proxy.port, timeout=10)
    assert get(conn, "/d/f.bin", {"Range": "bytes=0-3"})[1] == DATA[:4]
    served.stop()
    r, _ = get(conn, "/d/f.bin")
    assert r.status == 502
    served.start()
    # The client's connection to the proxy lives on; the proxy reconnects upstream.
    r, body = get(conn, "/d/f.bin", {"Range": "bytes=4-7"})
    assert (r.status, body) == (206, DATA[4:8])


def test_proxy_refuses_a_remote_upstream():
    with pytest.raises(ValueError, match="127.0.0.1"):
        FaultProxy("http://example.com:80")


def test_moto_s3_upload_and_signed_reads_through_the_proxy(moto_s3, s3_bucket, tmp_path):
    boto3 = pytest.importorskip("boto3", reason="boto3 (a moto dependency) signs S3 requests")
    store = tmp_path / "store"
    (store / "sub").mkdir(parents=True)
    (store / "a.bin").write_bytes(DATA)
    (store / "sub" / "b.txt").write_bytes(b"hello")
    keys = moto_s3.upload_dir(store, s3_bucket, "p/q")
    assert keys == ["p/q/a.bin", "p/q/sub/b.txt"]
    opts = moto_s3.storage_options()
    assert opts["aws_endpoint"] == moto_s3.url
    with FaultProxy(moto_s3.url) as proxy:
        s3 = boto3.client(
            "s3",
            endpoint_url=proxy.url,
            region_name=opts["aws_region"],
            aws_access_key_id=opts["aws_access_key_id"],
            aws_secret_access_key=opts["aws_secret_access_key"],
        )
        listed = s3.list_objects_v2(Bucket=s3_bucket, Prefix="p/q/")
        assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [
            ("p/q/a.bin", len(DATA)),
            ("p/q/sub/b.txt", 5),
        ]
        got = s3.get_object(Bucket=s3_bucket, Key="p/q/a.bin", Range="bytes=300-4299")
        assert got["Body"].read() == DATA[300:4300]
        assert got["ContentRange"] == f"bytes 300-4299/{len(DATA)}"
        assert proxy.requests(f"/{s3_bucket}/p/q/a.bin") == 1
