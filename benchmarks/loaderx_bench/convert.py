"""Converter throughput: ``loaderx.converter.convert`` against ``datasets``' own
``save_to_disk`` and against pyarrow's Parquet writer, on the same data in the
same run.

Datasets, built offline from files every test environment has:

* ``photos``: JPEG tiles cut from the photographs bundled with scikit-image and
  scikit-learn (128x128 crops every 16 pixels, each encoded at qualities 75 and
  90), as an ``Image`` column, with the source photo as a ``ClassLabel``. convert
  stores each file's bytes (Ragged uint8) and the labels (Dense int64).
* ``text``: the sentences of the Python standard library's docstrings (the corpus
  of examples/word2vec), as a ``string`` column and as word ids (``List(int32)``,
  vocabulary of the 20,000 most frequent words). convert stores the ids as Ragged
  int32 and the strings as their UTF-8 bytes (``utf8=["text"]``).

Each dataset is first saved with ``save_to_disk`` and loaded back with
``load_from_disk``, so every method reads the same memory-mapped Arrow table, which
is read once before the rounds so that it is in the page cache.

Before timing, one conversion is checked record by record against the Arrow
source (file bytes, labels, ids, UTF-8 text), and the baselines' outputs are read
back and compared with the source table.

Methods, each timed until its output is durable (an fsync of every file; convert
already syncs when it publishes): convert with codec raw and zstd,
``Dataset.save_to_disk`` (Arrow IPC, uncompressed) and ``pyarrow.parquet.write_table``
without compression and with zstd. The methods run in interleaved rounds (three;
``--quick``: one, on a smaller corpus) and each row shows its median round.
``MiB/s`` is the Arrow source's bytes (``Table.nbytes``) over the time.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loaderx_bench.files import disk_bytes, sync_tree
from loaderx_bench.machine import checkout, load_average, machine, one_bench_at_a_time
from loaderx_bench.paths import REPO
from loaderx_bench.report import fmt_num, table
from loaderx_bench.units import MIB

TILE = 128
STRIDE = 16
QUALITIES = (75, 90)
VOCAB = 20_000


def photos(quick: bool):
    """The photos dataset: JPEG tiles and the photo each came from."""
    import skimage.data
    from datasets import ClassLabel, Dataset, Features, Image
    from PIL import Image as PILImage
    from sklearn.datasets import load_sample_images

    sources: dict[str, np.ndarray] = {}
    for name in ("astronaut", "chelsea", "coffee", "rocket", "retina", "hubble_deep_field"):
        sources[name] = getattr(skimage.data, name)()
    for name, img in zip(("china", "flower"), load_sample_images().images, strict=True):
        sources[name] = img
    names = sorted(sources)
    stride = STRIDE * (4 if quick else 1)
    files: list[bytes] = []
    labels: list[int] = []
    for label, name in enumerate(names):
        img = sources[name]
        for y in range(0, img.shape[0] - TILE + 1, stride):
            for x in range(0, img.shape[1] - TILE + 1, stride):
                tile = PILImage.fromarray(np.ascontiguousarray(img[y : y + TILE, x : x + TILE]))
                for q in QUALITIES:
                    buf = io.BytesIO()
                    tile.save(buf, format="JPEG", quality=q)
                    files.append(buf.getvalue())
                    labels.append(label)
    features = Features({"image": Image(), "label": ClassLabel(names=names)})
    data = {"image": [{"bytes": f, "path": None} for f in files], "label": labels}
    return Dataset.from_dict(data, features=features), {}


def text(quick: bool):
    """The text dataset: stdlib docstring sentences as strings and as word ids."""
    sys.path.insert(0, str(REPO / "examples" / "word2vec"))
    try:
        from prepare import build_vocab, read_corpus  # examples/word2vec/prepare.py
    finally:
        sys.path.pop(0)
    from datasets import Dataset, Features, List, Value

    sents, _ = read_corpus(200_000 if quick else None)
    vocab = build_vocab(sents, VOCAB)
    index = {w: i for i, w in enumerate(vocab)}
    ids = [[index.get(w, 1) for w in s] for s in sents]
    features = Features({"text": Value("string"), "ids": List(Value("int32"))})
    data = {"text": [" ".join(s) for s in sents], "ids": ids}
    return Dataset.from_dict(data, features=features), {"utf8": ["text"]}


DATASETS: dict[str, Callable[[bool], tuple[object, dict]]] = {"photos": photos, "text": text}


def verify(ds, out: Path) -> None:
    """Every stored record equals its Arrow source value."""
    from loaderx.zrecord import Dense
    from loaderx.zrecord import open as open_store

    table_ = ds.data.table
    for name in ds.column_names:
        col = table_.column(name)
        with open_store(out / name) as s:
            if isinstance(s, Dense):
                got = np.from_dlpack(s[:]).tolist()
                want = col.to_pylist()
            else:
                recs = [np.from_dlpack(t) for t in s[:].to_tensors()]
                values = col.to_pylist()
                if isinstance(values[0], dict):  # an Image file
                    got, want = [r.tobytes() for r in recs], [v["bytes"] for v in values]
                elif isinstance(values[0], str):
                    got, want = [r.tobytes().decode("utf-8") for r in recs], values
                else:
                    got, want = [r.tolist() for r in recs], values
        if got != want:
            raise SystemExit(f"verification failed: column {name!r} differs from the source")


def verify_baselines(ds, saved: Path, parquet: Path) -> None:
    import datasets
    import pyarrow.parquet as pq

    src = ds.data.table
    back = datasets.load_from_disk(str(saved)).data.table
    if not back.equals(src):
        raise SystemExit("verification failed: save_to_disk output differs from the source")
    if not pq.read_table(parquet).equals(src):
        raise SystemExit("verification failed: Parquet output differs from the source")


def methods(options: dict) -> dict[str, Callable[[object, Path], None]]:
    import pyarrow.parquet as pq

    from loaderx.converter import convert

    def conv(codec: str) -> Callable[[object, Path], None]:
        return lambda ds, out: convert(ds, out, codec=codec, progress=False, **options)

    return {
        "convert raw": conv("raw"),
        "convert zstd": conv("zstd"),
        "save_to_disk": lambda ds, out: ds.save_to_disk(str(out)),
        "parquet none": lambda ds, out: pq.write_table(ds.data.table, out, compression="none"),
        "parquet zstd": lambda ds, out: pq.write_table(ds.data.table, out, compression="zstd"),
    }


def run(name: str, quick: bool, rounds: int, work: Path) -> str:
    import warnings

    import datasets

    from loaderx.converter import CodecAdviceWarning

    warnings.simplefilter("ignore", CodecAdviceWarning)  # the summary shows the sizes
    datasets.disable_progress_bars()
    t0 = time.perf_counter()
    built, options = DATASETS[name](quick)
    src_dir = work / f"{name}-source"
    built.save_to_disk(str(src_dir))
    ds = datasets.load_from_disk(str(src_dir))
    nbytes = ds.data.table.nbytes
    print(
        f"\n### {name}: {len(ds):,} rows, {nbytes / MIB:,.1f} MiB of Arrow "
        f"(built in {time.perf_counter() - t0:.0f} s)"
    )
    for f in sorted(src_dir.rglob("*.arrow")):
        f.read_bytes()
    ms = methods(options)
    first = work / f"{name}-check"
    conversion = ms["convert raw"](ds, first)
    verify(ds, first)
    saved, parquet = work / f"{name}-saved", work / f"{name}.parquet"
    ms["save_to_disk"](ds, saved)
    ms["parquet none"](ds, parquet)
    verify_baselines(ds, saved, parquet)
    for p in (first, saved, parquet):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    print(
        "verified: every converted record equals the Arrow source; the baselines "
        "read back equal to it"
    )
    print(conversion.summary())
    times: dict[str, list[float]] = {m: [] for m in ms}
    sizes: dict[str, int] = {}
    for _ in range(rounds):
        for m, write in ms.items():
            out = work / f"{name}-{m.replace(' ', '-')}"
            os.sync()
            start = time.perf_counter()
            write(ds, out)
            sync_tree(out)
            times[m].append(time.perf_counter() - start)
            sizes[m] = disk_bytes(out)
            shutil.rmtree(out) if out.is_dir() else out.unlink()
    base = statistics.median(times["save_to_disk"])
    rows = []
    for m in ms:
        t = statistics.median(times[m])
        rows.append(
            [
                m,
                f"{t:.2f}",
                f"{len(ds) / t:,.0f}",
                fmt_num(nbytes / MIB / t),
                f"{sizes[m] / MIB:,.1f}",
                f"{base / t:.2f}x",
            ]
        )
    headers = ["method", "s", "rows/s", "MiB/s", "output MiB", "speed vs save_to_disk"]
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller data, one round")
    ap.add_argument("--dataset", choices=sorted(DATASETS), action="append")
    ap.add_argument("--dir", help="work directory (default: a new one under /tmp)")
    args = ap.parse_args(argv)
    rounds = 1 if args.quick else 3
    work = Path(args.dir or tempfile.mkdtemp(prefix="loaderx-bench-convert-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"Machine: {machine()}")
    print(f"loaderx checkout: {checkout()}")
    print(f"Load average at start: {load_average()}")
    started = time.perf_counter()
    try:
        with one_bench_at_a_time():
            for name in args.dataset or sorted(DATASETS):
                print(run(name, args.quick, rounds, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nLoad average at end: {load_average()}; {time.perf_counter() - started:.0f} s in all")
    return 0
