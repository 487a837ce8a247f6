"""What an engine write must equal: the stores one writer makes from the same
rows in the same order, compared record by record, and the rows used."""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from xml.etree import ElementTree

import numpy as np
import pyarrow as pa

from loaderx.zrecord import Dense, Ragged, RaggedBatch
from loaderx.zrecord import open as open_store

DICT = bytes(range(256)) * 8


def table(n: int, seed: int = 0) -> pa.Table:
    """Rows of every kind the rules map: scalars, a fixed-size array (Dense by
    shapes=), lists of numbers, nested lists, binary and strings."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 6, n)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "score": pa.array(rng.standard_normal(n).astype(np.float32)),
            "flag": pa.array(rng.integers(0, 2, n).astype(bool)),
            "emb": pa.array(
                [rng.standard_normal(4).astype(np.float32).tolist() for _ in range(n)],
                pa.list_(pa.float32()),
            ),
            "tokens": pa.array(
                [rng.integers(-(2**31), 2**31, k).tolist() for k in lens], pa.list_(pa.int32())
            ),
            "grid": pa.array(
                [[[int(k), int(j)] for j in range(k)] for k in lens], pa.list_(pa.list_(pa.int16()))
            ),
            "blob": pa.array([bytes(rng.integers(0, 256, k, dtype=np.uint8)) for k in lens]),
            "text": pa.array(["é" * int(k) + str(i) for i, k in enumerate(lens)]),
        }
    )


SHAPES = {"emb": (4,)}


def reference(t: pa.Table, root: str, codec: str) -> None:
    """One writer per column over the same rows: the expected stores."""
    os.makedirs(root)
    dict_bytes = DICT if codec == "zstd_dict" else None
    for name in ("id", "score", "flag"):
        col = t.column(name).to_numpy()
        with Dense.create(
            os.path.join(root, name), col.dtype, (), codec=codec, dict_bytes=dict_bytes
        ) as w:
            w.append(col)
    emb = np.array(t.column("emb").to_pylist(), np.float32).reshape(-1, 4)
    with Dense.create(
        os.path.join(root, "emb"), np.float32, (4,), codec=codec, dict_bytes=dict_bytes
    ) as w:
        w.append(emb)
    ragged = {
        "tokens": [np.array(r, np.int32) for r in t.column("tokens").to_pylist()],
        # An empty list of lists has no inner length: its shape is (0, 0).
        "grid": [
            np.array(r, np.int16).reshape(len(r), 2 if r else 0)
            for r in t.column("grid").to_pylist()
        ],
        "blob": [np.frombuffer(r, np.uint8) for r in t.column("blob").to_pylist()],
        "text": [np.frombuffer(r.encode(), np.uint8) for r in t.column("text").to_pylist()],
    }
    for name, recs in ragged.items():
        dtype = recs[0].dtype if recs else np.uint8
        with Ragged.create(
            os.path.join(root, name), dtype, ndim=recs[0].ndim if recs else 1, codec=codec,
            dict_bytes=dict_bytes,
        ) as w:  # fmt: skip
            if recs:
                w.append(RaggedBatch.from_records(recs))


def records(path: str, storage_options=None) -> tuple[str, str, str, list[np.ndarray]]:
    """A store's kind, dtype, codec and every record."""
    with open_store(path, storage_options=storage_options) as s:
        s.verify()
        every = np.arange(len(s), dtype=np.int64)
        if isinstance(s, Ragged):
            out = [np.from_dlpack(t).copy() for t in s.gather(every).to_tensors()]
        else:
            out = list(np.from_dlpack(s[every]).copy())
        return type(s).__name__, str(s.dtype), s.codec, out


def assert_same_stores(got: str, want: str, columns: list[str], storage_options=None) -> None:
    """The stores under `got` (a path or a URL) hold `want`'s records exactly."""
    if storage_options is None:
        assert sorted(os.listdir(got)) == sorted(columns)
    for c in columns:
        g = records(f"{got}/{c}", storage_options)
        w = records(os.path.join(want, c))
        assert g[:3] == w[:3], c
        assert len(g[3]) == len(w[3]), c
        for k, (a, b) in enumerate(zip(g[3], w[3], strict=True)):
            assert a.dtype == b.dtype and a.shape == b.shape, (c, k, a, b)
            np.testing.assert_array_equal(a, b, err_msg=f"{c}[{k}]")


def bucket_keys(server, bucket: str) -> list[str]:
    """Every key in `bucket` of moto's server, by S3's ListObjectsV2."""
    keys: list[str] = []
    token = ""
    while True:
        query = "list-type=2" + (
            f"&continuation-token={urllib.parse.quote(token)}" if token else ""
        )
        with urllib.request.urlopen(f"{server.url}/{bucket}?{query}", timeout=30) as r:
            root = ElementTree.fromstring(r.read())
        ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
        keys += [e.text or "" for e in root.iter(f"{ns}Key")]
        nxt = root.find(f"{ns}NextContinuationToken")
        if nxt is None or not nxt.text:
            return sorted(keys)
        token = nxt.text
