"""Convert a text corpus with several processes, one part store per task, then
publish one store with ``loaderx.zrecord.concat``, and check that it holds exactly
what one writer converting the whole corpus writes.

The corpus is the sentences of the Python standard library's docstrings, found and
split by ``examples/word2vec/prepare.py`` (its ``stdlib_files``, ``docstrings`` and
``sentences`` are imported, so both examples read the same text): every Python
ships it, so nothing is downloaded. One record per sentence, in two stores:

  OUT/text    Ragged uint8, ndim 1   the sentence's lowercased words joined by
                                     single spaces, as UTF-8 bytes (byte-level
                                     tokens: no vocabulary for the tasks to share)
  OUT/source  Dense int32 (2,)       the number of the file the sentence came from
                                     (in the sorted file list) and its word count

The files, sorted by path, are cut into ``--parts`` contiguous runs of about equal
bytes; ``convert_part`` converts one run into ``OUT/parts/part-NNNN/{text,source}``.
A ``concurrent.futures.ProcessPoolExecutor`` of ``--workers`` processes maps it over
the parts; ``concat`` then publishes ``OUT/text`` and ``OUT/source`` from the parts
in order. ``convert_part`` over all files, in this process, writes the single-writer
reference ``OUT/single/{text,source}``; both results are verified and compared
record for record. Timings and counts go to ``OUT/result.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from loaderx.zrecord import Dense, Ragged, RaggedBatch, concat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "word2vec"))
from prepare import docstrings, sentences, stdlib_files  # noqa: E402

# reduced: what CI runs, the first files of the stdlib in path order.
SIZES = {"reduced": {"files": 40, "workers": 2}, "full": {"files": None, "workers": None}}


def convert_part(files: Sequence[str], first: int, dest: str, codec: str) -> dict[str, float]:
    """Converts `files` (numbered from `first`) into the part stores `dest`/text and
    `dest`/source. The whole task: what any process pool or cluster engine maps."""
    cpu = time.process_time()
    texts: list[np.ndarray] = []
    source: list[tuple[int, int]] = []
    for number, path in enumerate(files, start=first):
        for doc in docstrings(Path(path)):
            for words in sentences(doc):
                texts.append(np.frombuffer(" ".join(words).encode(), dtype=np.uint8))
                source.append((number, len(words)))
    # One data file per part: a store holds at most 255, and the parallelism
    # comes from the parts.
    with Ragged.create(f"{dest}/text", np.uint8, ndim=1, codec=codec, data_shards=1) as w:
        if texts:
            w.append(RaggedBatch.from_records(texts))
    with Dense.create(f"{dest}/source", np.int32, (2,), codec=codec, data_shards=1) as w:
        w.append(np.array(source, dtype=np.int32).reshape(-1, 2))
    return {
        "records": len(texts),
        "bytes": sum(t.size for t in texts),
        "cpu_seconds": round(time.process_time() - cpu, 3),
    }


def split(files: list[Path], parts: int) -> list[tuple[list[str], int]]:
    """`files` cut into at most `parts` contiguous runs of about equal bytes, each
    with the number of its first file."""
    sizes = np.array([f.stat().st_size for f in files], dtype=np.float64)
    ends = np.cumsum(sizes)
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, parts) / parts, side="right")
    bounds = [0, *sorted(set(int(c) for c in cuts) - {0, len(files)}), len(files)]
    return [([str(f) for f in files[a:b]], a) for a, b in zip(bounds, bounds[1:], strict=False)]


def same_records(a: str, b: str) -> None:
    """Raises AssertionError unless the stores at `a` and `b` hold the same records."""
    with Ragged.open(f"{a}/text") as x, Ragged.open(f"{b}/text") as y:
        x.verify()
        y.verify()
        assert len(x) == len(y), (len(x), len(y))
        for tx, ty in zip(x[:].to_tensors(), y[:].to_tensors(), strict=True):
            assert np.array_equal(np.from_dlpack(tx), np.from_dlpack(ty))
    with Dense.open(f"{a}/source") as x, Dense.open(f"{b}/source") as y:
        x.verify()
        y.verify()
        assert np.array_equal(np.from_dlpack(x[:]), np.from_dlpack(y[:]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=SIZES, default="reduced")
    ap.add_argument("--workers", type=int, help="processes (reduced: 2; full: every CPU)")
    ap.add_argument("--parts", type=int, help="part stores (default: 4 per worker)")
    ap.add_argument("--codec", default="zstd", choices=["raw", "zstd"])
    ap.add_argument("--out", type=Path, help="default data/parallel_convert/SIZE")
    args = ap.parse_args(argv)
    preset = SIZES[args.size]
    workers = args.workers or preset["workers"] or os.cpu_count() or 1
    parts = args.parts or 4 * workers
    out = args.out or Path("data/parallel_convert") / args.size
    if out.exists():
        shutil.rmtree(out)  # the example's own output from an earlier run
    out.mkdir(parents=True)

    files = stdlib_files()[1][: preset["files"]]
    tasks = split(files, parts)
    dests = [str(out / "parts" / f"part-{k:04d}") for k in range(len(tasks))]

    t0 = time.perf_counter()
    # spawn: each worker starts clean, with no copy of this process's threads or
    # open stores, the way a cluster engine's workers start.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        done = list(
            pool.map(
                convert_part,
                [t[0] for t in tasks],
                [t[1] for t in tasks],
                dests,
                [args.codec] * len(tasks),
            )
        )
    t1 = time.perf_counter()
    text = concat([f"{d}/text" for d in dests], out / "text")
    source = concat([f"{d}/source" for d in dests], out / "source")
    t2 = time.perf_counter()
    single = convert_part([str(f) for f in files], 0, str(out / "single"), args.codec)
    t3 = time.perf_counter()

    same_records(str(out), str(out / "single"))
    records = sum(d["records"] for d in done)
    assert records == single["records"] == text.records == source.records
    result = {
        "size": args.size,
        "python": sys.version.split()[0],
        "files": len(files),
        "parts": len(tasks),
        "workers": workers,
        "codec": args.codec,
        "records": records,
        "text_bytes": sum(d["bytes"] for d in done),
        "part_records": [d["records"] for d in done],
        "linked_files": text.linked_files + source.linked_files,
        "copied_files": text.copied_files + source.copied_files,
        "seconds": {
            "parts": round(t1 - t0, 3),
            "concat": round(t2 - t1, 3),
            "single_writer": round(t3 - t2, 3),
        },
        # CPU time inside the tasks: on a machine shared with other jobs, the
        # wall-clock times above also count waiting for a core.
        "cpu_seconds": {
            "parts": round(sum(d["cpu_seconds"] for d in done), 3),
            "single_writer": single["cpu_seconds"],
        },
        "identical": True,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    s = result["seconds"]
    print(
        f"parallel_convert: {len(files)} stdlib files, {records} sentences, "
        f"{result['text_bytes'] / 2**20:.2f} MiB of text, codec {args.codec}"
    )
    print(
        f"parallel_convert: {len(tasks)} parts on {workers} processes in {s['parts']:.2f}s, "
        f"concat {s['concat']:.3f}s ({result['linked_files']} data files linked, "
        f"{result['copied_files']} copied); one writer in this process {s['single_writer']:.2f}s"
    )
    c = result["cpu_seconds"]
    print(
        f"parallel_convert: CPU time in the tasks {c['parts']:.2f}s in all, "
        f"{c['single_writer']:.2f}s in the one writer"
    )
    print(f"parallel_convert: {out}/text and {out}/source equal the single writer's records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
