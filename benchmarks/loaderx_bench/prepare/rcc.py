"""Reading Qt binary resource bundles (``.rcc``), where some Debian packages keep
their images."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator

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
