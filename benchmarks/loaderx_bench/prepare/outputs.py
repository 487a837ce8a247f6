"""The outputs of a preparation: arrays saved atomically with the SHA-256 of their
payload, ``metadata.json``, and the check that existing outputs are up to date."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np


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
