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
    memory, built from tests/fake_gpu_runtime.c."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fake GPU runtime")
    lib = tmp_path_factory.mktemp("fake-gpu") / "libfakegpu.so"
    source = Path(__file__).with_name("fake_gpu_runtime.c")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(source)], check=True)
    return lib


def host(t):
    """A NumPy view of a DLTensor (shares memory)."""
    return np.from_dlpack(t)
