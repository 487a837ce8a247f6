import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def fake_runtime(tmp_path_factory):
    """A library with the CUDA and HIP entry points whose "device" memory is host
    memory, built from tests/support/fake_gpu_runtime.c."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fake GPU runtime")
    lib = tmp_path_factory.mktemp("fake-gpu") / "libfakegpu.so"
    source = Path(__file__).parent / "support" / "fake_gpu_runtime.c"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(source)], check=True)
    return lib


def host(t):
    """A NumPy view of a DLTensor (shares memory)."""
    return np.from_dlpack(t)


# Servers for the remote-store tests (tests/support/remote_servers.py), all on 127.0.0.1.


@pytest.fixture
def range_server(tmp_path):
    """An HTTP server with byte ranges serving tmp_path (a store written to
    tmp_path / "s" is at range_server.url + "/s")."""
    from remote_servers import RangeServer

    with RangeServer(tmp_path) as server:
        yield server


@pytest.fixture
def fault_proxy(range_server):
    """A FaultProxy in front of range_server, with no latency or faults set."""
    from remote_servers import FaultProxy

    with FaultProxy(range_server.url) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def moto_s3():
    """moto's S3 server in a child process, started once per session (about 3 s)."""
    pytest.importorskip("moto", reason="moto[server] (the test extra) runs the S3 server")
    from remote_servers import MotoS3

    with MotoS3() as server:
        yield server


@pytest.fixture
def s3_bucket(moto_s3, request):
    """A new, empty bucket on moto_s3 for this test."""
    import re

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"t{len(moto_s3.buckets)}-{name}"
    moto_s3.create_bucket(name)
    return name


class DLPackProducer:
    """Another framework's CPU array as loaderx sees it: by the DLPack protocol
    only (not a NumPy array), exporting `a`."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()
