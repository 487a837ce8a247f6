"""The loaderx command line: output, --json values, exit codes."""

import importlib.metadata
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import loaderx
from loaderx import converter
from loaderx.__main__ import find_stores, main
from loaderx._cli import info as info_command
from loaderx._cli import verify as verify_command
from loaderx.converter import _hub as hub
from loaderx.utils import CodecAdvice, codec_advice
from loaderx.zrecord import Dense, Ragged, RaggedBatch

LENGTHS = [0, 7, 3, 12, 1, 40, 5, 5, 9, 2, 30, 17]


def data_bytes(path):
    return sum(
        os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.startswith("data-")
    )


def make_ragged(path, codec="zstd", attrs=None):
    records = [np.arange(n, dtype=np.int16).reshape(n, 1).repeat(2, 1) for n in LENGTHS]
    with Ragged.create(path, np.int16, ndim=2, codec=codec, data_shards=3, attrs=attrs) as w:
        w.append(RaggedBatch.from_records(records))
    return str(path)


def make_dense(path, data, codec):
    with Dense.create(path, data.dtype, data.shape[1:], codec=codec, data_shards=2) as w:
        w.append(data)
    return str(path)


def info_json(capsys, *paths):
    assert main(["info", "--json", *map(str, paths)]) == 0
    return json.loads(capsys.readouterr().out)


def test_info_json_values(tmp_path, capsys):
    rag = make_ragged(tmp_path / "rag", attrs={"source": "test", "ids": [1, 2]})
    dense = make_dense(tmp_path / "dense", np.tile(np.arange(512, dtype=np.int32), (30, 1)), "zstd")
    doc = info_json(capsys, rag, dense)
    assert doc["errors"] == []
    r, d = doc["stores"]

    elements = np.array(LENGTHS) * 2  # shape (n, 2)
    assert r == {
        "path": rag,
        "kind": "ragged",
        "dtype": "int16",
        "item_shape": None,
        "ndim": 2,
        "records": len(LENGTHS),
        "codec": "zstd",
        "format_version": 2,
        "header_checksum": f"{Ragged.open(rag).header_checksum:#018x}",
        "data_files": 3,
        "data_file_bytes": data_bytes(rag),
        "logical_bytes": int(elements.sum()) * 2,
        "stored_bytes": data_bytes(rag),
        "ratio": int(elements.sum()) * 2 / data_bytes(rag),
        "elements_per_record": {
            "min": 0,
            "mean": float(elements.mean()),
            "max": 80,
            "p50": int(np.percentile(elements, 50, method="inverted_cdf")),
            "p90": int(np.percentile(elements, 90, method="inverted_cdf")),
            "p99": int(np.percentile(elements, 99, method="inverted_cdf")),
        },
        "attrs": {"source": "test", "ids": [1, 2]},
        "advice": None,
    }
    assert (r["elements_per_record"]["p50"], r["elements_per_record"]["p90"]) == (10, 60)

    assert d["kind"] == "dense" and d["item_shape"] == [512] and d["ndim"] == 1
    assert d["records"] == 30 and d["data_files"] == 2
    assert d["logical_bytes"] == 30 * 512 * 4
    assert d["stored_bytes"] == data_bytes(dense) < d["logical_bytes"]
    assert d["ratio"] == 30 * 512 * 4 / data_bytes(dense)
    assert d["elements_per_record"] is None and d["attrs"] == {} and d["advice"] is None


def test_info_text(tmp_path, capsys):
    rag = make_ragged(tmp_path / "rag", codec="raw", attrs={"tokenizer": "bytes"})
    assert main(["info", rag]) == 0
    out = capsys.readouterr().out.splitlines()
    logical = sum(LENGTHS) * 2 * 2
    assert out[0] == f"{rag}: Ragged int16 ndim=2, 12 records, codec=raw, data_shards=3"
    assert logical == 524
    assert out[2] == "  logical     524 bytes (524 B)"
    assert out[3] == "  stored      524 bytes (524 B), ratio 1.00x"
    assert out[4] == "  elements    per record: min 0, mean 21.8, max 80; p50 10, p90 60, p99 80"
    assert out[5] == '  attrs       {"tokenizer": "bytes"}'


def test_empty_store(tmp_path, capsys):
    Dense.create(tmp_path / "e", np.float32, (3,), codec="zstd").close()
    [e] = info_json(capsys, tmp_path / "e")["stores"]
    assert (e["records"], e["logical_bytes"], e["stored_bytes"]) == (0, 0, 0)
    assert e["ratio"] is None and e["advice"] is None


def test_codec_advice_rule():
    # A compressing codec that does not pay (stored > 0.95 of raw)...
    assert codec_advice("zstd", 1000, 1000 * 31, 1000 * 40).codec == "raw"  # tiny records
    assert codec_advice("zstd", 1000, 1000 * 32, 1000 * 40).codec == "zstd_dict"
    assert codec_advice("zstd", 999, 999 * 32, 999 * 40).codec == "raw"  # too few to train
    assert codec_advice("zstd", 1000, 1000 * 4095, 1000 * 4095).codec == "zstd_dict"
    assert codec_advice("zstd", 1000, 1000 * 4096, 1000 * 4096).codec == "raw"  # large
    assert codec_advice("zstd_dict", 1000, 1000 * 100, 1000 * 100).codec == "raw"
    # ...and one that does.
    assert codec_advice("zstd", 1000, 100_000, 95_000) is None
    assert codec_advice("zstd", 1000, 100_000, 95_001).codec == "zstd_dict"
    # Raw: only a sample compressed by zstd says anything.
    assert codec_advice("raw", 10, 40960, 40960, zstd_ratio=2.0) == CodecAdvice(
        "zstd",
        "zstd shrinks a sample of the records 2.0x; codec='zstd' would store about "
        "20,480 bytes instead of 40,960",
    )
    assert codec_advice("raw", 10, 40960, 40960, zstd_ratio=1.99) is None
    assert codec_advice("raw", 10, 40960, 40960) is None
    assert codec_advice("zstd", 0, 0, 0) is None


def test_info_advises_on_real_stores(tmp_path, capsys):
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (1000, 64), dtype=np.uint8)
    small = make_dense(tmp_path / "small", noise, "zstd")
    tiny = make_dense(tmp_path / "tiny", noise[:, :8].copy(), "zstd")
    big_zeros = make_dense(tmp_path / "big", np.zeros((20, 8192), np.uint8), "zstd")
    big = rng.integers(0, 256, (8, 8192), dtype=np.uint8)
    big_noise = make_dense(tmp_path / "bign", big, "zstd")
    raw_zeros = make_dense(tmp_path / "rawz", np.zeros((20, 8192), np.uint8), "raw")
    raw_noise = make_dense(tmp_path / "rawn", big, "raw")
    paths = [small, tiny, big_zeros, big_noise, raw_zeros, raw_noise]
    by_path = {s["path"]: s for s in info_json(capsys, *paths)["stores"]}
    advised = {p: (by_path[p]["advice"] or {}).get("codec") for p in paths}
    assert advised == {
        small: "zstd_dict",
        tiny: "raw",
        big_zeros: None,
        big_noise: "raw",
        raw_zeros: "zstd",
        raw_noise: None,
    }
    assert by_path[small]["stored_bytes"] > 0.95 * by_path[small]["logical_bytes"]
    assert main(["info", small]) == 0
    assert "  advice      zstd_dict: records this small gain nothing from plain zstd" in (
        capsys.readouterr().out
    )


def test_converted_root(tmp_path, capsys):
    datasets = pytest.importorskip("datasets", reason="the converter extra converts")
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"label": [0, 1, 1], "tok": [[1], [2, 3], []]}),
            "test": datasets.Dataset.from_dict({"label": [4, 5], "tok": [[7, 8, 9], [1]]}),
        }
    )
    root = os.fspath(converter.convert(dd, tmp_path / "root", codec="raw", progress=False))
    stores = info_json(capsys, root)["stores"]
    assert [(s["path"], s["kind"], s["records"]) for s in stores] == [
        (os.path.join(root, "test", "label"), "dense", 2),
        (os.path.join(root, "test", "tok"), "ragged", 2),
        (os.path.join(root, "train", "label"), "dense", 3),
        (os.path.join(root, "train", "tok"), "ragged", 3),
    ]
    assert stores[1]["elements_per_record"]["max"] == 3
    assert main(["verify", "--quiet", root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines] == [s["path"] for s in stores]
    assert lines[0].startswith(f"{stores[0]['path']}: 2 records intact (")
    # A column whose header is lost is reported, not skipped.
    os.remove(os.path.join(root, "train", "tok", "header.bin"))
    assert main(["info", "--json", root]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [s["path"] for s in doc["stores"]] == [s["path"] for s in stores[:3]]
    [failure] = doc["errors"]
    assert failure["path"] == os.path.join(root, "train", "tok")
    assert failure["error"] == "ZrecordError"
    assert failure["file"] == os.path.join(root, "train", "tok", "header.bin")
    assert "not a published zrecord store" in failure["message"]


def test_verify_names_the_file_and_record(tmp_path, capsys):
    good = make_ragged(tmp_path / "good")
    with Ragged.create(tmp_path / "bad", np.int64, ndim=1, codec="raw", data_shards=1) as w:
        w.append(RaggedBatch.from_records([np.full(n, n, np.int64) for n in (4, 6, 3)]))
    data = tmp_path / "bad" / "data-000.bin"
    raw = bytearray(data.read_bytes())
    raw[(4 + 6) * 8 + 1] ^= 0x10  # inside record 2
    data.write_bytes(bytes(raw))
    assert main(["verify", str(tmp_path / "bad"), good]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{good}: 12 records intact (")
    assert err.startswith(f"error: {tmp_path / 'bad'}: {data}: record 2: ")
    assert f"\n  file: {data}\n  record: 2\n" in err


def test_exit_codes(tmp_path, capsys):
    assert main([]) == 2
    assert main(["info"]) == 2
    assert main(["frobnicate", "x"]) == 2
    assert main(["bench", "x", "--steps", "0"]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path / "missing")]) == 1
    assert "no such store" in capsys.readouterr().err
    os.mkdir(tmp_path / "empty")
    assert main(["info", str(tmp_path / "empty")]) == 1
    assert "not a published zrecord store" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["clean", str(tmp_path / "file")]) == 2
    assert main(["clean", str(tmp_path)]) == 0


def test_clean_of_a_url_removes_old_job_prefixes_only(tmp_path, capsys):
    # A killed engine driver's job prefix, its heartbeat an hour old, and a live one's.
    old, live = tmp_path / ".parts-0123456789ab", tmp_path / ".parts-ba9876543210"
    for job in (old, live):
        job.mkdir()
        (job / "heartbeat").write_text("0\n")
    hour_ago = time.time() - 3600
    os.utime(old / "heartbeat", (hour_ago, hour_ago))
    assert main(["clean", f"file://{tmp_path}"]) == 0
    assert capsys.readouterr().out == f"removed file://{old}\n"
    assert sorted(os.listdir(tmp_path)) == [live.name]


def test_urls_go_to_open_unchanged(monkeypatch, capsys):
    assert find_stores("s3://bucket/prefix/store") == ["s3://bucket/prefix/store"]
    seen = []

    def fake_open(path, storage_options=None):
        seen.append((path, storage_options))
        raise OSError(f"{path}: unreachable")

    monkeypatch.setattr(info_command, "open_reader", fake_open)
    monkeypatch.setattr(verify_command, "open_reader", fake_open)
    assert main(["info", "https://example.invalid/s", "s3://b/k"]) == 1
    assert seen == [("https://example.invalid/s", {}), ("s3://b/k", {})]
    seen.clear()
    assert main(["verify", "s3://b/k", "-o", "aws_region=x", "-o", "endpoint=http://h"]) == 1
    assert seen == [("s3://b/k", {"aws_region": "x", "endpoint": "http://h"})]
    assert main(["info", "s3://b/k", "-o", "no-equals-sign"]) == 2


def test_convert_from_disk_parquet_and_hub(tmp_path, capsys, monkeypatch):
    datasets = pytest.importorskip("datasets", reason="the converter extra converts")
    ds = datasets.Dataset.from_dict({"x": [3, 1, 2], "v": [[1.5], [], [2.0, 3.0]]})
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "d.parquet"))
    for src in ("saved", "d.parquet"):
        dest = tmp_path / f"out-{src}"
        assert main(["convert", str(tmp_path / src), str(dest), "--codec", "raw", "--quiet"]) == 0
        assert capsys.readouterr().out == f"{dest}\n"
        assert np.from_dlpack(Dense.open(dest / "x")[:]).tolist() == [3, 1, 2]
        assert [np.from_dlpack(t).tolist() for t in Ragged.open(dest / "v")[:].to_tensors()] == [
            [1.5],
            [],
            [2.0, 3.0],
        ]
    calls = []

    def fake_hub(repo, *, config=None, revision=None):
        calls.append((repo, config, revision))
        return datasets.DatasetDict({"train": ds})

    monkeypatch.setattr(hub, "huggingface", fake_hub)
    dest = tmp_path / "hub"
    assert main(["convert", "owner/name", str(dest), "--revision", "abc", "--quiet"]) == 0
    assert calls == [("owner/name", None, "abc")]
    assert len(Dense.open(dest / "train" / "x")) == 3
    # Three 8-byte records in zstd: the converter's advice, one line each.
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"advice: zstd stored column 'train/{c}' in 51 bytes for 24 raw (8 bytes per record): "
        "records this small cannot be compressed one by one; use codec='raw'"
        for c in ("x", "v")
    ]
    assert main(["convert", str(tmp_path / "missing.parquet"), str(tmp_path / "m")]) == 1
    assert "missing.parquet" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "saved"), str(dest), "--quiet"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_bench(tmp_path, capfd):
    rag = make_ragged(tmp_path / "rag")
    assert main(["bench", rag, "--steps", "3", "--batch-size", "16", "--json"]) == 0
    d = json.loads(capfd.readouterr().out)
    assert (d["path"], d["steps"], d["batch_size"], d["threads"]) == (rag, 3, 16, None)
    assert d["records_per_s"] == pytest.approx(48 / d["seconds"])
    assert d["mib_per_s"] > 0
    before = loaderx.thread_count()
    try:
        assert main(["bench", rag, "--steps", "2", "--threads", "1", "--json"]) == 0
        assert json.loads(capfd.readouterr().out)["threads"] == 1
        assert loaderx.thread_count() == 1
        assert main(["bench", rag, "--threads", "2000"]) == 2
        assert capfd.readouterr().err == "error: the thread count must be in 1..=1024, got 2000\n"
    finally:
        loaderx.set_threads(before)


def test_python_dash_m_and_console_script(tmp_path):
    rag = make_ragged(tmp_path / "rag")
    out = subprocess.run(
        [sys.executable, "-m", "loaderx", "info", rag], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{rag}: Ragged int16 ndim=2, 12 records")
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert [e.value for e in scripts if e.name == "loaderx"] == ["loaderx.__main__:main"]


def test_verify_progress_is_silent_off_a_terminal(tmp_path, capsys):
    rag = make_ragged(tmp_path / "rag")
    assert main(["verify", rag]) == 0  # progress on, but stderr is not a terminal
    out, err = capsys.readouterr()
    assert out.startswith(f"{rag}: 12 records intact (") and err == ""


def test_concat(tmp_path, capsys):
    parts = [
        make_dense(tmp_path / f"part-{k}", np.full((k + 2, 3), k, np.int16), "zstd")
        for k in range(3)
    ]
    dest = tmp_path / "all"
    assert main(["concat", *parts, str(dest), "--quiet"]) == 0
    assert capsys.readouterr().out == (
        f"{dest}: 9 records from 3 parts, 6 data files (6 linked, 0 copied)\n"
    )
    with Dense.open(dest) as d:
        want = np.repeat(np.arange(3), [2, 3, 4]).astype(np.int16)[:, None].repeat(3, 1)
        assert np.array_equal(np.from_dlpack(d[:]), want)
    assert main(["concat", parts[0], str(tmp_path / "copied"), "--copy", "--verify"]) == 0
    assert capsys.readouterr().out.endswith("(0 linked, 2 copied)\n")
    # Refusals: an existing DEST, a schema mismatch; nothing more is published.
    before = sorted(os.listdir(tmp_path))
    assert main(["concat", parts[0], str(dest)]) == 1
    assert "already exists" in capsys.readouterr().err
    other = make_dense(tmp_path / "other", np.zeros((1, 3), np.int32), "zstd")
    assert main(["concat", parts[0], other, str(tmp_path / "mixed")]) == 1
    assert capsys.readouterr().err.startswith(f"error: {other}: dtype int32, but {parts[0]}")
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "other"])
    assert main(["concat", str(dest)]) == 2
