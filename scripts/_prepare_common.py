"""Shared helpers for the dataset preparation scripts (prepare_vision.py, prepare_tokens.py).

Debian packages are fetched with ``apt-get download`` into a cache directory and unpacked
with ``dpkg-deb -x`` into a directory of their own; nothing is installed on the system.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT / "data"


def log(msg: str) -> None:
    print(msg, flush=True)


class Timer:
    """Wall-clock timer that prints labelled lap times."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.last = self.start

    def lap(self, label: str) -> float:
        now = time.perf_counter()
        dt = now - self.last
        self.last = now
        log(f"  [{dt:7.1f}s] {label}")
        return dt

    def total(self) -> float:
        return time.perf_counter() - self.start


# --------------------------------------------------------------------------- Debian packages

_apt_updated = False


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def _apt_update() -> None:
    global _apt_updated
    if _apt_updated:
        return
    log("  apt-get update")
    _run(["apt-get", "update", "-q"])
    _apt_updated = True


def _cached_deb(cache: Path, pkg: str) -> Path | None:
    hits = sorted(cache.glob(f"{pkg}_*.deb"))
    return hits[-1] if hits else None


def apt_candidate(pkg: str) -> str | None:
    """Candidate version apt would download, or None if apt does not know the package."""
    try:
        out = _run(["apt-cache", "policy", pkg]).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Candidate:"):
            v = line.split(":", 1)[1].strip()
            return None if v in ("", "(none)") else v
    return None


def fetch_deb(pkg: str, cache: Path) -> Path:
    """Return the path of ``pkg``'s .deb in ``cache``, downloading it with apt-get if absent.

    Raises RuntimeError if apt cannot provide the package.
    """
    cache.mkdir(parents=True, exist_ok=True)
    hit = _cached_deb(cache, pkg)
    if hit is not None:
        return hit
    if shutil.which("apt-get") is None:
        raise RuntimeError("apt-get is not available on this machine")
    if apt_candidate(pkg) is None:
        _apt_update()
    try:
        _run(["apt-get", "download", pkg], cwd=cache)
    except subprocess.CalledProcessError as e:
        if not _apt_updated:
            _apt_update()
            try:
                _run(["apt-get", "download", pkg], cwd=cache)
            except subprocess.CalledProcessError as e2:
                raise RuntimeError(f"apt-get download {pkg} failed: {e2.stderr.strip()}") from e2
        else:
            raise RuntimeError(f"apt-get download {pkg} failed: {e.stderr.strip()}") from e
    hit = _cached_deb(cache, pkg)
    if hit is None:
        raise RuntimeError(f"apt-get download {pkg} produced no .deb")
    log(f"  downloaded {hit.name} ({hit.stat().st_size / 1e6:.1f} MB)")
    return hit


def deb_field(deb: Path, field: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), field]).stdout.strip()


def unpack_deb(deb: Path, dest_root: Path) -> Path:
    """Unpack ``deb`` with ``dpkg-deb -x`` into ``dest_root/<deb stem>`` (once) and return it."""
    dest = dest_root / deb.stem
    stamp = dest / ".unpacked"
    if stamp.exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    _run(["dpkg-deb", "-x", str(deb), str(dest)])
    stamp.write_text(deb.name + "\n")
    return dest


def get_package(pkg: str, cache: Path) -> tuple[Path, dict]:
    """Download (cached) and unpack ``pkg``; return (unpacked root, info dict)."""
    deb = fetch_deb(pkg, cache / "debs")
    root = unpack_deb(deb, cache / "unpacked")
    info = {
        "package": deb_field(deb, "Package"),
        "version": deb_field(deb, "Version"),
        "deb": deb.name,
        "deb_sha256": sha256_file(deb),
    }
    return root, info


def first_available(candidates: list[str]) -> str | None:
    """First package name in ``candidates`` that apt offers (updating the lists once if needed)."""
    for attempt in range(2):
        for pkg in candidates:
            if apt_candidate(pkg) is not None:
                return pkg
        if attempt == 0 and shutil.which("apt-get") is not None:
            _apt_update()
    return None


# --------------------------------------------------------------------------- hashing / metadata


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_array(a: np.ndarray) -> str:
    """SHA-256 of an array's logical payload: its elements in C order, native little-endian.

    The .npy header is not included, so the digest depends only on dtype, shape order and values.
    """
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    h = hashlib.sha256()
    flat = a.reshape(-1).view(np.uint8)
    step = 64 << 20
    for i in range(0, flat.size, step):
        h.update(flat[i : i + step].data)
    return h.hexdigest()


def array_summary(a: np.ndarray) -> dict:
    return {"dtype": str(a.dtype), "shape": list(a.shape), "sha256": sha256_array(a)}


def save_array(path: Path, a: np.ndarray) -> dict:
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, a)
    os.replace(tmp, path)
    return array_summary(a)


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def outputs_match(out: Path, arrays: dict[str, str], meta_checks: dict) -> bool:
    """True if ``out/metadata.json`` exists, has the given top-level values, and every array
    named in ``arrays`` (file name -> metadata key) exists with matching shape, dtype and SHA-256.
    """
    meta_path = out / "metadata.json"
    if not meta_path.exists():
        return False
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError:
        return False
    for k, v in meta_checks.items():
        if meta.get(k) != v:
            return False
    for fname, key in arrays.items():
        p = out / fname
        want = meta.get("arrays", {}).get(key)
        if not p.exists() or want is None:
            return False
        a = np.load(p, mmap_mode="r")
        if str(a.dtype) != want["dtype"] or list(a.shape) != want["shape"]:
            return False
        if sha256_array(a) != want["sha256"]:
            return False
    return True


def relpath_str(p: Path, root: Path) -> str:
    return p.relative_to(root).as_posix()


def unique_files(paths) -> list[Path]:
    """Sorted regular files, without symlinks and without a second path to the same file
    (Debian packages link directories, e.g. python3.11-doc/html -> ../python3.11/html)."""
    seen: set[Path] = set()
    out = []
    for p in sorted(paths):
        if p.is_symlink() or not p.is_file():
            continue
        real = p.resolve()
        if real in seen:
            continue
        seen.add(real)
        out.append(p)
    return out


# --------------------------------------------------------------------------- Qt resource (.rcc)

_RCC_COMPRESSED_ZLIB = 0x01
_RCC_DIRECTORY = 0x02
_RCC_COMPRESSED_ZSTD = 0x04


def iter_rcc(blob: bytes, with_data: bool = True) -> Iterator[tuple[str, bytes | None]]:
    """Yield (path, payload) for every file in a binary Qt resource bundle (``rcc -binary``).

    With ``with_data=False`` the payload is None (nothing is decompressed).

    Layout (all integers big-endian): magic ``qres``, format version, then the offsets of the
    tree, the data and the names sections (version >= 3 adds a flags word). Tree nodes are 14
    bytes (version 1) or 22 bytes (version >= 2, with an 8-byte modification time): name offset
    (u32), flags (u16), then for a directory child count (u32) + index of the first child (u32),
    for a file locale (u16 country, u16 language) + data offset (u32). A name is u16 length,
    u32 hash, then UTF-16BE characters. A data entry is a u32 size followed by the bytes; zlib
    entries start with a u32 uncompressed size (qCompress), zstd entries are a plain frame.
    """
    if blob[:4] != b"qres":
        raise ValueError("not a Qt binary resource (missing 'qres' magic)")
    version, tree_off, data_off, names_off = struct.unpack_from(">4I", blob, 4)
    if version not in (1, 2, 3):
        raise ValueError(f"unsupported rcc format version {version}")
    node_size = 14 if version == 1 else 22

    def name_at(off: int) -> str:
        (n,) = struct.unpack_from(">H", blob, names_off + off)
        start = names_off + off + 6
        return blob[start : start + 2 * n].decode("utf-16-be")

    def payload(off: int, flags: int) -> bytes:
        (size,) = struct.unpack_from(">I", blob, data_off + off)
        raw = blob[data_off + off + 4 : data_off + off + 4 + size]
        if flags & _RCC_COMPRESSED_ZLIB:
            (usize,) = struct.unpack_from(">I", raw, 0)
            out = zlib.decompress(raw[4:])
            if len(out) != usize:
                raise ValueError("rcc zlib entry has the wrong uncompressed size")
            return out
        if flags & _RCC_COMPRESSED_ZSTD:
            return _zstd_decompress(raw)
        return raw

    def walk(index: int, prefix: str) -> Iterator[tuple[str, bytes | None]]:
        base = tree_off + index * node_size
        name_off, flags = struct.unpack_from(">IH", blob, base)
        name = "" if index == 0 else name_at(name_off)
        path = f"{prefix}/{name}" if name else prefix
        if flags & _RCC_DIRECTORY:
            count, first = struct.unpack_from(">II", blob, base + 6)
            for child in range(first, first + count):
                yield from walk(child, path)
        else:
            (data_rel,) = struct.unpack_from(">I", blob, base + 10)
            yield path, (payload(data_rel, flags) if with_data else None)

    yield from walk(0, "")


def _zstd_decompress(raw: bytes) -> bytes:
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        zstandard = None
    if zstandard is not None:
        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=1 << 30)
    if shutil.which("zstd") is None:
        raise RuntimeError("a zstd-compressed rcc entry needs the 'zstandard' module or 'zstd'")
    return subprocess.run(["zstd", "-dc"], input=raw, check=True, capture_output=True).stdout


def die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)
