"""Builds tests/support/fs_faults.c and runs Python code in a child process under it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def build(tmp_path_factory) -> Path:
    """The fault library, compiled with the system C compiler (skips without one)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc or gcc) to build tests/support/fs_faults.c")
    lib = tmp_path_factory.mktemp("fs-faults") / "libfsfaults.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(HERE / "fs_faults.c"), "-ldl"],
        check=True,
    )
    return lib


def env(lib: Path, fault: str, at: int = 1) -> dict[str, str]:
    e = dict(os.environ)
    e["LD_PRELOAD"] = str(lib)
    e["LOADERX_FAULT"] = fault
    e["LOADERX_FAULT_AT"] = str(at)
    return e


def run(lib: Path, fault: str, code: str, *args: str, at: int = 1) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env(lib, fault, at),
        capture_output=True,
        text=True,
    )


def start(lib: Path, fault: str, code: str, *args: str, at: int = 1) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env(lib, fault, at),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
