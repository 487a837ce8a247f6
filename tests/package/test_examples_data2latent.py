"""examples/data2latent end to end at its reduced size: prepare the stores, encode
them with each framework installed (JAX needed, torch when importable) in both
layouts, and check what the latent stores hold.

The reduced data set has 18 records and the batch is 4, so the last of the 5 steps
is a partial one whose global batch wraps around to records 0 and 1.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("skimage")  # prepare.py reads scikit-image's bundled photographs
pytest.importorskip("PIL")

from loaderx.zrecord import Dense, Ragged  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data2latent"
PHOTOS, BATCH = 2, 4
N = PHOTOS * 9  # common.VARIANTS per photo
LAYOUTS = ("dense", "ragged")


def run(script: str, *args: object, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if ok:
        assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def example():
    """The example's `common` and `backends` modules, imported the way its scripts
    import them (from their directory), and forgotten afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(EXAMPLE))
        import backends
        import common

        yield common, backends
    for name in ("backends", "common"):
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data2latent") / "data"
    proc = run("prepare.py", "--out", out, "--photos", PHOTOS)
    assert "equals Pillow" in proc.stdout and f"on {N}/{N} records" in proc.stdout
    return out


@pytest.fixture(scope="module")
def encode(data):
    """encode(framework) runs encode.py in both layouts once per module and returns
    the data directory."""
    done: set[str] = set()

    def encoded(framework: str) -> Path:
        if framework == "torch":
            pytest.importorskip("torch")
        if framework not in done:
            for layout in LAYOUTS:
                proc = run(
                    "encode.py", "--data", data, "--framework", framework,
                    "--layout", layout, "--batch", BATCH,
                )  # fmt: skip
                assert f"{N} records in 5 steps of {BATCH} (the last keeps 2)" in proc.stdout
            done.add(framework)
        return data

    return encoded


def latents(data: Path, framework: str, layout: str) -> np.ndarray:
    with Dense.open(data / "latents" / f"{framework}-{layout}") as ds:
        assert ds.dtype == np.float32 and ds.item_shape == (8, 28, 28)
        return np.from_dlpack(ds[:]).copy()


@pytest.mark.parametrize("framework", ["jax", "torch"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_record_once_in_order(example, encode, framework, layout):
    common, backends = example
    data = encode(framework)
    stored = latents(data, framework, layout)
    assert N % BATCH and len(stored) == N
    # Record i's latent is the encoding of image i alone: check records from the
    # first step, the middle and the partial last step (15, 16, 17).
    backend = backends.make_backend(framework, "cpu")
    reader = (Dense if layout == "dense" else Ragged).open(data / layout)
    to_batch = backend.dense_images if layout == "dense" else backend.ragged_images
    with reader:
        for i in (0, 3, 4, 9, 15, 16, 17):
            alone = backend.to_host(backend.encode(to_batch(reader[[i]])))[0]
            assert np.abs(alone - stored[i]).max() <= common.SINGLE_ATOL, i
            # ... and not any other record's: neighbours differ by far more.
            for j in (i - 1, (i + 1) % N):
                assert np.abs(alone - stored[j]).max() > 1000 * common.SINGLE_ATOL, (i, j)


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_dense_and_ragged_latents_are_equal(example, encode, framework):
    common, _ = example
    data = encode(framework)
    diff = np.abs(latents(data, framework, "dense") - latents(data, framework, "ragged")).max()
    assert diff <= common.LAYOUT_ATOL


@pytest.mark.parametrize("layout", LAYOUTS)
def test_torch_and_jax_latents_agree(example, encode, layout):
    common, _ = example
    encode("jax")
    data = encode("torch")
    diff = np.abs(latents(data, "torch", layout) - latents(data, "jax", layout)).max()
    assert diff <= common.FRAMEWORK_ATOL


def test_compare_script(encode):
    data = encode("jax")
    proc = run("compare.py", "--data", data)
    assert "jax-dense     vs jax-ragged    max |diff| 0 (exact) ok" in proc.stdout
    assert "FAIL" not in proc.stdout


def test_jax_device_slicing_matches_host(example, data):
    """The JAX path that slices Ragged records on a device (a jitted function),
    run here on host memory, gives the regions the NumPy path gives."""
    _, backends = example
    backend = backends.JaxBackend("cpu")
    with Ragged.open(data / "ragged") as rs:
        batch = rs[[5, 0, 17, 9]]
        host = backend.regions(batch)
        device = backend.regions(batch, on_device=True)
    for (a, shape_a), (b, shape_b) in zip(host, device, strict=True):
        assert shape_a == shape_b and a.shape == b.shape
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_cuda_allocator_fails_clearly_without_a_gpu(data):
    from loaderx.allocator import cuda

    try:
        cuda.Allocator(0).close()
    except (RuntimeError, ValueError):
        pass  # what this test is for: no usable CUDA runtime or device
    else:
        pytest.skip("a CUDA runtime and device are present")
    proc = run(
        "encode.py", "--data", data, "--framework", "jax", "--layout", "dense",
        "--allocator", "cuda", ok=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("--allocator cuda: "), proc.stderr
