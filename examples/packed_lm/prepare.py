"""Build the token store of the packed language-model example from a real corpus.

The corpus is the word2vec example's: the docstrings of the running interpreter's
standard library, read and split into sentences of lowercase words by
``examples/word2vec/prepare.py`` (nothing is downloaded). One record per
docstring: ``BOS``, then its sentences' word ids, each sentence followed by
``EOS``. The vocabulary is PAD (0), BOS (1), EOS (2), UNK (3) and the
``--vocab - 4`` most frequent words (ties alphabetical).

  OUT/tokens       Ragged int32 ndim 1   one record per docstring
  OUT/meta.json    corpus and record statistics
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np

from loaderx.zrecord import Ragged, RaggedBatch

PAD, BOS, EOS, UNK = 0, 1, 2, 3
HERE = Path(__file__).resolve().parent


def _word2vec_prepare():
    """The word2vec example's corpus reader (examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "word2vec_prepare", HERE.parent / "word2vec" / "prepare.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_docstrings(max_words: int | None) -> tuple[list[list[list[str]]], dict[str, object]]:
    """Each docstring's sentences, files in path order, until `max_words` words."""
    w2v = _word2vec_prepare()
    root, files = w2v.stdlib_files()
    docs: list[list[list[str]]] = []
    words = read = 0
    for f in files:
        read += 1
        for doc in w2v.docstrings(f):
            sents = w2v.sentences(doc)
            if sents:
                docs.append(sents)
                words += sum(len(s) for s in sents)
        if max_words is not None and words >= max_words:
            break
    info = {
        "source": "docstrings of the Python standard library",
        "files_read": read,
        "files_available": len(files),
        "last_file": files[read - 1].relative_to(root).as_posix(),
        "words": words,
    }
    return docs, info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab", type=int, default=1024, help="vocabulary size incl. 4 specials")
    ap.add_argument("--max-words", type=int, default=None, help="stop reading past this many")
    args = ap.parse_args(argv)

    docs, corpus = read_docstrings(args.max_words)
    counts = Counter(w for doc in docs for s in doc for w in s)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: args.vocab - 4]
    vocab = ["<pad>", "<bos>", "<eos>", "<unk>"] + [w for w, _ in ranked]
    index = {w: i for i, w in enumerate(vocab)}
    records = [
        np.array([BOS] + [i for s in doc for i in [*(index.get(w, UNK) for w in s), EOS]], np.int32)
        for doc in docs
    ]
    shutil.rmtree(args.out / "tokens", ignore_errors=True)  # create() refuses a path that exists
    args.out.mkdir(parents=True, exist_ok=True)
    with Ragged.create(args.out / "tokens", np.int32, ndim=1, codec="zstd") as w:
        w.append(RaggedBatch.from_records(records))
    with Ragged.open(args.out / "tokens") as r:
        lengths = r.lengths()
        assert lengths.tolist() == [len(x) for x in records]
    meta = {
        "corpus": corpus,
        "vocab_size": len(vocab),
        "records": len(records),
        "tokens": int(lengths.sum()),
        "length_mean": round(float(lengths.mean()), 2),
        "length_max": int(lengths.max()),
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    (args.out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    print(
        f"prepare: {corpus['files_read']} of {corpus['files_available']} stdlib files, "
        f"{len(records)} docstrings, {meta['tokens']} tokens (mean {meta['length_mean']}, "
        f"max {meta['length_max']}), vocabulary {len(vocab)}"
    )


if __name__ == "__main__":
    main()
