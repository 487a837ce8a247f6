"""The top-level package: its names, what importing it costs, and what a type
checker sees of it."""

import json
import subprocess
import sys
import textwrap
from importlib import resources

import pytest

import loaderx
from loaderx import dataloader, errors, sampler, zrecord


def test_import_loaderx_loads_no_numpy_and_no_extension():
    code = (
        "import sys, loaderx; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'loaderx', 'torch', 'jax', 'pyarrow')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['loaderx', 'loaderx.errors']"


def test_the_main_names_are_the_modules_own():
    assert loaderx.Dense is zrecord.Dense
    assert loaderx.Ragged is zrecord.Ragged
    assert loaderx.RaggedBatch is zrecord.RaggedBatch
    assert loaderx.DLTensor is zrecord.DLTensor
    assert loaderx.Loader is dataloader.Loader
    assert loaderx.Sampler is sampler.Sampler
    assert loaderx.MixtureSampler is sampler.MixtureSampler
    for name in errors.__all__:
        assert getattr(loaderx, name) is getattr(errors, name)
    assert loaderx.__all__ == [
        "DLTensor", "Dense", "Loader", "MixtureSampler", "Ragged", "RaggedBatch", "Sampler",
        "__version__", "set_threads", "thread_count",
        *errors.__all__,
    ]  # fmt: skip
    assert set(loaderx.__all__) <= set(dir(loaderx))


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="^module 'loaderx' has no attribute 'Densee'$"):
        _ = loaderx.Densee
    assert not hasattr(loaderx, "convert")  # needs pyarrow: import loaderx.converter


def test_the_package_is_typed_and_ships_the_extensions_stub():
    files = resources.files("loaderx")
    assert files.joinpath("py.typed").is_file()
    assert files.joinpath("_native.pyi").is_file()


USE = """
import numpy as np

import loaderx
from loaderx import _native

store = _native.Store.open("s")
reveal_type(store.path)
reveal_type(store.dictionary())
with loaderx.Dense.open("d") as ds:
    reveal_type(ds)
    reveal_type(ds[3])
    reveal_type(ds[3].shape)
    reveal_type(ds[[1, 2]])
with loaderx.Ragged.open("r") as rs:
    reveal_type(rs[np.arange(3)])
reveal_type(loaderx.Sampler(10, 2, loaderx.Sampler.Mode.IID))
reveal_type(loaderx.OutOfRangeError)
"""


def test_a_type_checker_sees_the_stub_and_the_package(tmp_path):
    pytest.importorskip("pyright", reason="pyright comes with the test extra")
    (tmp_path / "use.py").write_text(textwrap.dedent(USE))
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({"typeCheckingMode": "strict"}))
    out = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    report = json.loads(out.stdout)
    diagnostics = report["generalDiagnostics"]
    assert [d["message"] for d in diagnostics if d["severity"] != "information"] == []
    assert [d["message"] for d in diagnostics] == [
        'Type of "store.path" is "Path"',
        'Type of "store.dictionary()" is "bytes | None"',
        'Type of "ds" is "Dense"',
        'Type of "ds[3]" is "DLTensor"',
        'Type of "ds[3].shape" is "tuple[int, ...]"',
        'Type of "ds[[1, 2]]" is "DLTensor"',
        'Type of "rs[np.arange(3)]" is "RaggedBatch"',
        'Type of "loaderx.Sampler(10, 2, loaderx.Sampler.Mode.IID)" is "Sampler"',
        'Type of "loaderx.OutOfRangeError" is "type[OutOfRangeError]"',
    ]
