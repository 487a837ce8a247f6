"""loaderx, LitData and MosaicML Streaming reading the same real images from the
same S3 server, behind the same round-trip latency: images/s into a training loop
and time to first batch, every reader starting from an empty cache.

The records are the first ``--records`` (2,500) images of ``data/vision``
(``scripts/prepare_vision.py``: uint8 photographs of 3x224x224), each with its
position as an int64 label. Each library writes them with its own writer,
uncompressed, and the files are sent to an s3s-fs server (PUT, one object per
file) in the bucket ``bench``: loaderx as two Dense stores (``Dense.create``),
MosaicML Streaming as MDS shards (``MDSWriter``, ``ndarray`` and ``int64``
columns, its default shard size), LitData as chunks (``litdata.optimize``, its
default chunk size). nginx in front of s3s-fs waits ``--latency-ms`` (50) before
answering each request, a distant object store's round trip; every reader
reaches the bucket through it.

Every configuration reads one pass (each record once, shuffled, in batches of
64, the last one smaller) in a fresh process with an empty cache directory:
MosaicML Streaming's ``StreamingDataset`` and LitData's ``StreamingDataset``
through a torch ``DataLoader`` (LitData's ``StreamingDataLoader``), loaderx's
``Loader`` with a ``WindowedSampler``, each first with the library's defaults,
then with the settings that read fastest among those tried (more workers, more
read ahead). The loop turns each batch into torch tensors, as a training step
would, and checks it: every label is a record's position, one image per batch
is compared with the source bytes (a CRC), and at the end every record was seen
exactly once. "first batch" is from before the dataset (or store) is opened
until the first batch is in the loop; "images/s" counts the whole pass, first
batch included. Peers run in ``.venv-engines`` (``ENGINES=1 bash
scripts/setup_bench.sh``): MosaicML Streaming pins an older NumPy.

Usage: PYTHONPATH=benchmarks .venv/bin/python scripts/bench_streaming_peers.py
       [--records N] [--latency-ms MS] [--rounds R] [--engines PYTHON]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from loaderx_bench.machine import load_average, machine, one_bench_at_a_time
from loaderx_bench.paths import DATA, REPO
from loaderx_bench.report import table
from loaderx_bench.servers import Nginx, S3sFs
from loaderx_bench.workers import emit, run_worker

BATCH = 64
BUCKET = "bench"
IMAGES = DATA / "vision" / "dense_images.npy"
ENGINES = REPO / ".venv-engines" / "bin" / "python"

# (library, setting): what the reader is given beyond the dataset.
CONFIGS: list[tuple[str, str, dict]] = [
    ("loaderx", "defaults", {}),
    ("loaderx", "workers=2, prefetch=8", {"workers": 2, "prefetch": 8}),
    ("streaming", "defaults", {}),
    ("streaming", "num_workers=1", {"num_workers": 1}),
    ("streaming", "num_workers=2", {"num_workers": 2}),
    ("litdata", "defaults", {}),
    ("litdata", "num_workers=2, max_pre_download=8", {"num_workers": 2, "max_pre_download": 8}),
]


def source(n: int) -> np.ndarray:
    images = np.load(IMAGES, mmap_mode="r")
    if len(images) < n:
        raise SystemExit(f"{IMAGES} holds {len(images)} images, fewer than {n}")
    return images[:n]


def crcs(images: np.ndarray) -> list[int]:
    return [zlib.crc32(np.ascontiguousarray(im).data) for im in images]


# -- writers (the peers' run in .venv-engines) -------------------------------------


def write_loaderx(images: np.ndarray, out: Path) -> None:
    from loaderx.zrecord import Dense

    with Dense.create(out / "image", np.uint8, images.shape[1:], codec="raw") as w:
        for start in range(0, len(images), 256):
            w.append(np.ascontiguousarray(images[start : start + 256]))
    with Dense.create(out / "label", np.int64, (), codec="raw") as w:
        w.append(np.arange(len(images), dtype=np.int64))


def write_streaming(n: int, out: Path) -> None:
    from streaming import MDSWriter

    images = source(n)
    shape = ",".join(map(str, images.shape[1:]))
    columns = {"image": f"ndarray:uint8:{shape}", "label": "int64"}
    with MDSWriter(out=str(out), columns=columns, compression=None) as w:
        for i in range(n):
            w.write({"image": np.ascontiguousarray(images[i]), "label": np.int64(i)})


def _litdata_item(i: int) -> dict:
    # Module level: optimize() sends it to its worker processes.
    return {"image": np.ascontiguousarray(source(i + 1)[i]), "label": i}


def write_litdata(n: int, out: Path) -> None:
    import litdata

    litdata.optimize(
        fn=_litdata_item, inputs=list(range(n)), output_dir=str(out), num_workers=1,
        chunk_bytes="64MB", mode="overwrite",
    )  # fmt: skip


# -- readers ------------------------------------------------------------------------


def _batches_loaderx(url: str, options: dict, cache: str, setting: dict):
    from loaderx.dataloader import Loader
    from loaderx.sampler import WindowedSampler
    from loaderx.zrecord import Cache, Dense

    image = Dense.open(f"{url}/image", storage_options=options, cache=Cache(cache))
    label = Dense.open(f"{url}/label", storage_options=options, cache=Cache(cache))
    sampler = WindowedSampler(image, BATCH, seed=1)
    import torch

    left = len(image)
    with Loader({"image": [image], "label": [label]}, sampler, **setting) as loader:
        while left > 0:
            (shard,) = loader.next()
            # A batch may straddle two passes: the pass ends at the last record's.
            take = min(left, BATCH)
            left -= take
            images, labels = torch.from_dlpack(shard["image"]), torch.from_dlpack(shard["label"])
            yield images[:take], labels[:take]


def _batches_streaming(url: str, cache: str, setting: dict):
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader

    extra = {k: v for k, v in setting.items() if k != "num_workers"}
    ds = StreamingDataset(
        remote=url, local=cache, shuffle=True, shuffle_seed=1, batch_size=BATCH, **extra
    )
    dl = DataLoader(ds, batch_size=BATCH, num_workers=setting.get("num_workers", 0))
    for batch in dl:
        yield batch["image"], batch["label"]


def _allow_http_for_obstore() -> None:
    """LitData downloads chunks with obstore, whose S3 store it configures from
    its boto3 client (endpoint, region) and which refuses a plain-HTTP endpoint
    unless told ``allow_http``: this server's. The one option is added; nothing
    else about LitData's path changes."""
    import obstore.store

    made = obstore.store.S3Store

    def store(*args, config=None, **kwargs):
        return made(*args, config={**(config or {}), "allow_http": True}, **kwargs)

    obstore.store.S3Store = store


def _batches_litdata(url: str, cache: str, endpoint: str, setting: dict):
    import litdata

    _allow_http_for_obstore()

    extra = {k: v for k, v in setting.items() if k != "num_workers"}
    ds = litdata.StreamingDataset(
        url, cache_dir=cache, shuffle=True, seed=1,
        storage_options={"endpoint_url": endpoint}, **extra,
    )  # fmt: skip
    dl = litdata.StreamingDataLoader(
        ds, batch_size=BATCH, num_workers=setting.get("num_workers", 0)
    )
    for batch in dl:
        yield batch["image"], batch["label"]


def read(lib: str, spec: dict) -> dict:
    """One pass in this process: time to first batch, images/s, and the checks."""
    import torch

    want = spec["crcs"]
    n = len(want)
    # Imported before the clock starts: "first batch" is opening and reading.
    if lib == "loaderx":
        import loaderx.dataloader  # noqa: F401
    elif lib == "streaming":
        import streaming  # noqa: F401
        import torch.utils.data  # noqa: F401
    else:
        import litdata  # noqa: F401
    seen = np.zeros(n, np.int64)
    cache = tempfile.mkdtemp(prefix=f"loaderx-peers-{lib}-")
    try:
        t0 = time.perf_counter()
        if lib == "loaderx":
            batches = _batches_loaderx(spec["url"], spec["options"], cache, spec["setting"])
        elif lib == "streaming":
            batches = _batches_streaming(spec["url"], cache, spec["setting"])
        else:
            batches = _batches_litdata(spec["url"], cache, spec["endpoint"], spec["setting"])
        first = None
        for k, (images, labels) in enumerate(batches):
            images, labels = torch.as_tensor(images), torch.as_tensor(labels)
            if first is None:
                first = time.perf_counter() - t0
            if images.shape[1:] != (3, 224, 224) or images.dtype != torch.uint8:
                raise AssertionError(f"batch {k}: images of {images.dtype} {tuple(images.shape)}")
            idx = labels.numpy().astype(np.int64)
            np.add.at(seen, idx, 1)
            j = k % len(idx)
            got = zlib.crc32(np.ascontiguousarray(images[j].numpy()).data)
            if got != want[idx[j]]:
                raise AssertionError(f"batch {k}: the image labelled {idx[j]} differs")
        total = time.perf_counter() - t0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if not (seen == 1).all():
        raise AssertionError(
            f"{int((seen == 0).sum())} records never seen, {int((seen > 1).sum())} seen twice"
        )
    return {"first_s": first, "images_s": n / total}


def worker(lib: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    emit({"status": "ok", **read(lib, spec)})


def writer(lib: str, n: int, out: str) -> None:
    (write_streaming if lib == "streaming" else write_litdata)(n, Path(out))
    emit({"status": "ok"})


def put_tree(root: Path, url: str, options: dict) -> None:
    """Every file under `root` as an object under `url`, sent through the server:
    s3s-fs keeps what a PUT computed (its ETag) and answers a ranged GET of an
    object it was sent without reading the whole file again, which it does for a
    file placed in its directory by hand."""
    from loaderx import _native

    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        _native.put_object(f"{url}/{path.relative_to(root).as_posix()}", path.read_bytes(), options)


# -- the run ------------------------------------------------------------------------


def _module_argv(*args: str) -> list[str]:
    return ["-m", "loaderx_bench.streaming_peers", *args]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2500)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--engines", type=Path, default=ENGINES, help="the peers' interpreter")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--writer", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    if args.writer:
        writer(args.writer[0], int(args.writer[1]), args.writer[2])
        return 0
    engines = args.engines
    if not engines.exists():
        raise SystemExit(f"{engines} is missing: ENGINES=1 bash scripts/setup_bench.sh")
    print(f"Machine: {machine()}")
    print(f"Load average at start: {load_average()}")
    images = source(args.records)
    want = crcs(images)
    print(
        f"{args.records:,} images of {'x'.join(map(str, images.shape[1:]))} uint8 "
        f"({images.nbytes / 2**20:.0f} MiB), batch {BATCH}, {args.latency_ms:g} ms per request",
        flush=True,
    )
    with one_bench_at_a_time(), tempfile.TemporaryDirectory(prefix="loaderx-peers-") as d:
        work = Path(d)
        (work / "s3" / BUCKET).mkdir(parents=True)
        sizes = {}
        for lib in ("loaderx", "streaming", "litdata"):
            out = work / "written" / lib
            out.mkdir(parents=True)
            t = time.perf_counter()
            if lib == "loaderx":
                write_loaderx(images, out)
            else:
                run_worker(engines, _module_argv("--writer", lib, str(args.records), str(out)))
            files = [p for p in out.rglob("*") if p.is_file()]
            sizes[lib] = sum(p.stat().st_size for p in files)
            print(
                f"  {lib}: wrote {len(files)} files, {sizes[lib] / 2**20:.1f} MiB "
                f"in {time.perf_counter() - t:.1f} s",
                flush=True,
            )
        with (
            S3sFs(work / "s3") as s3,
            Nginx(work / "s3", workers=2, delay_ms=args.latency_ms, upstream=s3.url) as front,
        ):
            for lib in ("loaderx", "streaming", "litdata"):
                put_tree(work / "written" / lib, f"s3://{BUCKET}/{lib}", s3.storage_options())
            opts = {**s3.storage_options(), "aws_endpoint": front.url}
            env = {
                "AWS_ACCESS_KEY_ID": S3sFs.ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": S3sFs.SECRET_KEY,
                "AWS_DEFAULT_REGION": S3sFs.REGION,
                "AWS_REGION": S3sFs.REGION,
                "S3_ENDPOINT_URL": front.url,
            }
            results: dict[tuple[str, str], list[dict]] = {}
            failed: dict[tuple[str, str], str] = {}
            for r in range(args.rounds):
                for lib, label, setting in CONFIGS:
                    spec = {
                        "url": f"s3://{BUCKET}/{lib}",
                        "options": opts,
                        "endpoint": front.url,
                        "setting": setting,
                        "crcs": want,
                    }
                    path = work / "spec.json"
                    path.write_text(json.dumps(spec))
                    try:
                        got = run_worker(
                            Path(sys.executable) if lib == "loaderx" else engines,
                            _module_argv("--worker", lib, str(path)),
                            env=env,
                            timeout=1800,
                        )  # fmt: skip
                    except RuntimeError as e:
                        # A setting the library cannot run is reported, not timed.
                        failed[(lib, label)] = str(e)
                        print(f"  round {r + 1} {lib} {label}: {e}", flush=True)
                        continue
                    results.setdefault((lib, label), []).append(got)
                    print(
                        f"  round {r + 1} {lib} {label}: first batch {got['first_s']:.2f} s, "
                        f"{got['images_s']:,.0f} images/s",
                        flush=True,
                    )
    rows, best = [], {}
    for lib, label, _ in CONFIGS:
        runs = results.get((lib, label))
        if not runs:
            rows.append([lib, label, "failed", failed[(lib, label)][:80]])
            continue
        first = statistics.median(r["first_s"] for r in runs)
        rate = statistics.median(r["images_s"] for r in runs)
        rows.append([lib, label, f"{first:.2f}", f"{rate:,.0f}"])
        b = best.get(lib)
        if b is None or rate > b[1]:
            best[lib] = (first, rate, label)
    print()
    print(table(["library", "setting", "first batch s", "images/s"], rows))
    lx = best["loaderx"]
    print()
    for peer in (p for p in ("streaming", "litdata") if p in best):
        p = best[peer]
        print(
            f"loaderx best ({lx[2]}) against {peer} best ({p[2]}): "
            f"images/s {lx[1] / p[1]:.2f}x, first batch {lx[0] / p[0]:.2f}x the time"
        )
    print(f"\nLoad average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
