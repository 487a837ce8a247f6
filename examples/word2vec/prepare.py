"""Build CBOW training stores from a real English corpus that every Python ships.

The corpus is the docstrings of the running interpreter's standard library (module,
class and function docstrings read with ``ast``; the ``test`` packages, ``idlelib``
and ``site-packages`` are left out). Nothing is downloaded, so CI can rebuild it; it
changes only with the Python version, which ``meta.json`` records.

Text processing: doctest lines (``>>>``/``...``) are dropped as code; each docstring
is split into sentences at ``. ! ?`` followed by white space and at blank lines;
a sentence is its lowercased words (``[a-z]+`` with an optional ``'s``-style
suffix). The vocabulary is PAD (id 0), UNK (id 1) and the ``--vocab - 2`` most
frequent words (ties broken alphabetically).

One training example per word of a sentence of two or more words: the center word
and its context, the up to ``W`` words on each side within the same sentence.

  OUT/stores/center          Dense int32 ()        the center word id
  OUT/stores/context_padded  Dense int32 (2W,)     left context right-aligned, right
                                                   context left-aligned, PAD elsewhere
  OUT/stores/context_packed  Ragged int32 ndim 1   the same ids without the PADs
  OUT/meta.json              corpus, vocabulary and store statistics
  OUT/vocab.txt              one word per line, line i is id i

Record i is the same example in all three stores, and every packed record is
checked against its padded row before the script ends.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import shutil
import sysconfig
import time
from collections import Counter
from pathlib import Path

import numpy as np

from loaderx.zrecord import Dense, Ragged, RaggedBatch

PAD, UNK = 0, 1
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "__pycache__"}
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n[ \t]*\n")
DOCTEST = re.compile(r"^\s*(>>>|\.\.\.)")


def stdlib_files() -> tuple[Path, list[Path]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p for p in root.rglob("*.py") if not SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])
    ]
    # Sorted by relative path so the corpus, and so record i, is the same on every run.
    return root, sorted(files, key=lambda p: p.relative_to(root).as_posix())


def docstrings(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):  # a few stdlib files are templates or Python 2
        return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, kinds):
            doc = ast.get_docstring(node)
            if doc:
                out.append(doc)
    return out


def sentences(doc: str) -> list[list[str]]:
    prose = "\n".join(line for line in doc.split("\n") if not DOCTEST.match(line))
    out = []
    for s in SENTENCE_END.split(prose):
        words = WORD.findall(s.lower())
        if len(words) >= 2:  # one word has no context
            out.append(words)
    return out


def read_corpus(max_words: int | None) -> tuple[list[list[str]], dict]:
    root, files = stdlib_files()
    sents: list[list[str]] = []
    n_words = n_files = 0
    for f in files:
        n_files += 1
        for doc in docstrings(f):
            for s in sentences(doc):
                sents.append(s)
                n_words += len(s)
        if max_words is not None and n_words >= max_words:
            break
    info = {
        "source": "docstrings of the Python standard library",
        "python": platform.python_version(),
        "files_read": n_files,
        "files_available": len(files),
        "last_file": files[n_files - 1].relative_to(root).as_posix(),
        "sentences": len(sents),
        "words": n_words,
    }
    return sents, info


def build_vocab(sents: list[list[str]], size: int) -> list[str]:
    counts = Counter(w for s in sents for w in s)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ["<pad>", "<unk>"] + [w for w, _ in ranked[: size - 2]]


def examples(
    sents: list[list[str]], vocab: list[str], window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(center (n,), padded contexts (n, 2W), valid mask (n, 2W)) for every word."""
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.fromiter((index.get(w, UNK) for s in sents for w in s), dtype=np.int32)
    lengths = np.array([len(s) for s in sents], dtype=np.int64)
    sent_of = np.repeat(np.arange(len(sents)), lengths)
    n = len(ids)
    # Context slots in reading order: -W..-1 then +1..+W around the center.
    offsets = np.array([*range(-window, 0), *range(1, window + 1)], dtype=np.int64)
    j = np.arange(n)[:, None] + offsets[None, :]
    inside = (j >= 0) & (j < n)
    jc = np.clip(j, 0, n - 1)
    valid = inside & (sent_of[jc] == sent_of[:, None])  # a context never crosses a sentence
    padded = np.where(valid, ids[jc], PAD).astype(np.int32)
    return ids, padded, valid


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("data/word2vec/full"))
    ap.add_argument("--window", type=int, default=8, help="context words on each side (W)")
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary size incl. PAD, UNK")
    ap.add_argument(
        "--max-words", type=int, default=None, help="stop reading files past this many words"
    )
    ap.add_argument("--codec", default="raw", choices=["raw", "zstd"])
    ap.add_argument("--force", action="store_true", help="rebuild even if OUT is up to date")
    args = ap.parse_args(argv)

    config = {
        "window": args.window,
        "vocab": args.vocab,
        "max_words": args.max_words,
        "codec": args.codec,
        "python": platform.python_version(),
    }
    meta_path = args.out / "meta.json"
    if not args.force and meta_path.exists():
        if json.loads(meta_path.read_text())["config"] == config:
            print(f"prepare: {args.out} is up to date (--force rebuilds)")
            return

    t0 = time.perf_counter()
    sents, corpus = read_corpus(args.max_words)
    vocab = build_vocab(sents, args.vocab)
    centers, padded, valid = examples(sents, vocab, args.window)
    lengths = valid.sum(axis=1)
    values = padded[valid]  # row-major: each record's ids in reading order
    cu = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu[1:])
    shapes = lengths.astype(np.uint64).reshape(-1, 1)
    read_s = time.perf_counter() - t0

    stores = args.out / "stores"
    shutil.rmtree(stores, ignore_errors=True)  # create() refuses a path that exists
    shutil.rmtree(args.out / "runs", ignore_errors=True)  # trained on the old stores
    stores.mkdir(parents=True)
    with Dense.create(stores / "center", np.int32, (), codec=args.codec) as w:
        w.append(centers)
    with Dense.create(
        stores / "context_padded", np.int32, (2 * args.window,), codec=args.codec
    ) as w:
        w.append(padded)
    with Ragged.create(stores / "context_packed", np.int32, ndim=1, codec=args.codec) as w:
        w.append(RaggedBatch(values, cu, shapes))

    # Both layouts must hold the same examples: every packed record equals its padded
    # row with the PADs removed, and the centers read back unchanged.
    with (
        Dense.open(stores / "center") as c,
        Dense.open(stores / "context_padded") as d,
        Ragged.open(stores / "context_packed") as r,
    ):
        assert np.array_equal(np.from_dlpack(c[:]), centers)
        rows = np.from_dlpack(d[:])
        batch = r[:]
        got_cu = np.from_dlpack(batch.cu_seqlens)
        assert np.array_equal(rows, padded) and np.array_equal(got_cu, cu)
        assert np.array_equal(np.from_dlpack(batch.values), rows[rows != PAD])

    n = len(centers)
    ctx_mean = float(lengths.mean())
    meta = {
        "config": config,
        "corpus": corpus,
        "text_processing": (
            "doctest lines dropped; sentences split at . ! ? + white space and at blank "
            "lines; words are lowercase [a-z]+('[a-z]+)?; sentences of one word dropped"
        ),
        "vocab_size": len(vocab),
        "pad_id": PAD,
        "unk_id": UNK,
        "unk_fraction": round(float((centers == UNK).mean()), 4),
        "records": n,
        "context_slots": 2 * args.window,
        "context_mean": round(ctx_mean, 3),
        "pad_fraction": round(1 - ctx_mean / (2 * args.window), 4),
        # What one record costs in a loader batch: 4-byte ids either way; a packed
        # record also carries one int32 cu_seqlens entry and one uint64 shape.
        "bytes_per_record": {
            "padded": 4 * 2 * args.window,
            "packed": round(4 * ctx_mean + 4 + 8, 3),
        },
        "disk_bytes": {s.name: du(s) for s in sorted(stores.iterdir())},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    print(
        f"prepare: Python {corpus['python']} stdlib docstrings, {corpus['files_read']} of "
        f"{corpus['files_available']} files, {corpus['sentences']} sentences, "
        f"{corpus['words']} words; vocabulary {len(vocab)} (UNK {meta['unk_fraction']:.1%} "
        f"of centers) in {read_s:.1f}s"
    )
    print(
        f"prepare: {n} records, window {args.window}: {2 * args.window} padded slots, "
        f"{ctx_mean:.2f} context words on average ({meta['pad_fraction']:.1%} padding); "
        f"bytes per record in a batch: padded {meta['bytes_per_record']['padded']}, "
        f"packed {meta['bytes_per_record']['packed']:.2f}"
    )
    print(
        "prepare: wrote "
        + ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in meta["disk_bytes"].items())
        + f" under {os.fspath(stores)}; packed records checked against padded rows"
    )


if __name__ == "__main__":
    main()
