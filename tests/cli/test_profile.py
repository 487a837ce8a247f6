"""``loaderx profile``: the summary, the picture, and advice that names the
bottleneck of a pipeline built to have it."""

import json

import numpy as np
import pytest
from remote_servers import HTTP_STORAGE_OPTIONS

from loaderx.__main__ import main
from loaderx._cli.profile import advice
from loaderx.dataloader._stats import LoaderStats
from loaderx.zrecord import Dense

SLOW = """
import time

def slow(shards):
    time.sleep(0.01)
    return shards
"""


def write(path, codec, records=512, size=16):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 4, (records, size), dtype=np.uint8)
    with Dense.create(path, np.uint8, (size,), codec=codec) as w:
        w.append(data)
    return str(path)


@pytest.fixture
def slow_module(tmp_path, monkeypatch):
    (tmp_path / "slowmod.py").write_text(SLOW)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "slowmod:slow"


def test_a_slow_transform_asks_for_workers_and_draws_the_run(tmp_path, slow_module, capsys):
    store = write(tmp_path / "x", "raw")
    png = tmp_path / "p.png"
    args = ["profile", store, "--steps", "30", "--batch-size", "16", "--workers", "1"]
    assert main([*args, "--transform", slow_module, "--png", str(png)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("input-bound ")
    assert "30 steps" in out[0] and "transform" in out[0]
    assert out[1].startswith("advice: transform takes ")
    assert out[1].endswith(": raise --workers (now 1) so that more steps transform at once")
    assert out[2] == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_workers_it_asks_for_worker_threads(tmp_path, slow_module, capsys):
    store = write(tmp_path / "x", "raw")
    args = ["profile", store, "--steps", "10", "--batch-size", "16", "--workers", "0"]
    assert main([*args, "--transform", slow_module]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("advice:")]
    assert line.endswith(": use worker threads (--workers N) so that steps transform at once")


@pytest.mark.parametrize(
    "codec,says", [("zstd", "mostly decoding: a store written with codec raw"), ("raw", "disk")]
)
def test_a_gather_bound_pipeline_names_the_codec_or_the_disk(tmp_path, capsys, codec, says):
    store = write(tmp_path / "x", codec, records=256, size=256 * 1024)
    args = ["profile", store, "--steps", "8", "--batch-size", "32", "--workers", "1", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stats"]["steps"] == 8
    (line,) = doc["advice"]
    assert line.startswith("gather takes ") and says in line


def test_a_remote_store_behind_latency_asks_for_a_cache(
    tmp_path, range_server, fault_proxy, capsys
):
    write(tmp_path / "x", "raw", records=4096, size=4096)
    fault_proxy.latency_ms = 30
    opts = [f"--storage-option={k}={v}" for k, v in HTTP_STORAGE_OPTIONS.items()]
    args = ["profile", fault_proxy.url + "/x", "--steps", "12", "--batch-size", "64"]
    assert main([*args, "--workers", "1", "--prefetch", "1", *opts, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (line,) = doc["advice"]
    assert line.startswith("fetch_wait takes ")
    assert "block cache" in line and "--prefetch (now 1)" in line


def test_a_consumer_slower_than_the_loader_is_told_it_keeps_up(tmp_path, capsys):
    store = write(tmp_path / "x", "raw")
    args = ["profile", store, "--steps", "15", "--batch-size", "16", "--step-time", "0.02"]
    assert main([*args, "--workers", "2"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("advice:")]
    assert "the loader keeps up" in line


def stats(stages, input_bound=1.0, steps=10) -> LoaderStats:
    zero = {"total_s": 0.0, "p50_s": 0.0, "p95_s": 0.0}
    return {
        "steps": steps,
        "elapsed_s": 1.0,
        "time_to_first_batch_s": 0.1,
        "input_bound": input_bound,
        "wait": zero,
        "stages": {k: {"total_s": v, "p50_s": 0.0, "p95_s": 0.0} for k, v in stages.items()},
        "queue": {"capacity": 8, "mean": 0.0, "max": 0, "empty": 1.0},
        "bytes_gathered": 0,
        "bytes_fetched": 0,
        "bytes_from_cache": 0,
    }


def test_advice_rules():
    three = {"draw": 0.1, "gather": 0.1, "transform": 0.1}
    assert advice(stats(three), 4, 4, False) == [
        "no stage takes half of a step (the longest, draw, takes 33%)"
    ]
    assert advice(stats({"draw": 0.9, "gather": 0.1}), 4, 4, False) == [
        "draw takes 90% of each step: the sampler's next() is slow; draw positions in bulk"
    ]
    assert advice(stats({"gather": 1.0}, input_bound=0.01), 4, 4, True)[0].startswith(
        "the consumer waited 1% of the time: the loader keeps up"
    )
    assert advice(stats({"gather": 1.0}, steps=0), 4, 4, True) == []


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--workers", "-1"], "-1 is negative"),
        (["--step-time", "x"], "'x' is not a number of seconds"),
        (["--transform", "nocolon"], "--transform must be MODULE:FUNCTION"),
        (["--transform", "no_such_module_here:f"], "No module named"),
    ],
)
def test_bad_arguments_are_usage_errors(tmp_path, capsys, argv, message):
    store = write(tmp_path / "x", "raw")
    assert main(["profile", store, *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_store_is_one_error_line(tmp_path, capsys):
    assert main(["profile", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'none'}: ") and err.count("\n") == 1
