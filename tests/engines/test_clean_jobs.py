"""A driver killed with SIGKILL leaves its job prefix in object storage;
``loaderx.zrecord.clean(root)`` removes it once its heartbeat has aged, and
never while the driver lives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from engine_reference import bucket_keys

from loaderx import errors
from loaderx.zrecord import clean

# A driver of a real engine write's machinery (plan, a task's part uploaded
# into the job prefix, the heartbeat), stopped while it waits on its "engine".
DRIVER = """
import json, sys, time
import pyarrow as pa
from loaderx._engine import _publish
from loaderx._engine._part import write_part
from loaderx._engine._plan import destination, plan_job
_publish.JOB_HEARTBEAT_S = 0.2

url, ready, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t = pa.table({"x": pa.array(range(10), pa.int64())})
dest = destination(url, opts)
job = plan_job(t.schema, dest, "", engine="spark", codec="raw", shapes=None,
               dict_bytes=None, attrs=None, storage_options=opts)

def run():
    write_part(t.to_batches(), job, 0, "a0")
    with open(ready, "w") as f:
        f.write(job.parts)
    time.sleep(600)

_publish.run_job(job, run)
"""


def start_driver(tmp_path, url: str, opts) -> tuple[subprocess.Popen[bytes], str]:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, url, str(ready), json.dumps(opts)], env=dict(os.environ)
    )
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text():
        assert proc.poll() is None, "the driver exited"
        assert time.monotonic() < deadline, "the driver did not start its job"
        time.sleep(0.05)
    return proc, ready.read_text()


@pytest.mark.parametrize("where", ["file", "s3"])
def test_a_killed_drivers_job_prefix_is_removed_once_its_heartbeat_is_old(tmp_path, where, request):
    if where == "s3":
        moto, bucket = request.getfixturevalue("moto_s3"), request.getfixturevalue("s3_bucket")
        opts = moto.storage_options()
        url = f"s3://{bucket}/corpus"

        def objects() -> list[str]:
            return [k.removeprefix("corpus/") for k in bucket_keys(moto, bucket)]
    else:
        opts = None
        (tmp_path / "bucket").mkdir()
        url = f"file://{tmp_path}/bucket/corpus"

        def objects() -> list[str]:
            root = tmp_path / "bucket" / "corpus"
            return sorted(
                os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
            )

    proc, parts = start_driver(tmp_path, url, opts)
    try:
        job = parts.removeprefix(url + "/")
        assert job.startswith(".parts-") and len(job) == len(".parts-") + 12
        held = objects()
        assert f"{job}/heartbeat" in held
        assert f"{job}/p000000-a0/x/header.bin" in held
        # The part's files age, but the live driver's heartbeat does not.
        time.sleep(3)
        assert clean(url, older_than=2, storage_options=opts) == []
        assert set(held) <= set(objects())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert clean(url, older_than=60, storage_options=opts) == []
    time.sleep(3)
    assert clean(url, older_than=2, storage_options=opts) == [parts]
    assert objects() == []
    assert clean(url, older_than=0, storage_options=opts) == []


def test_clean_takes_an_age_only_for_a_url(tmp_path):
    with pytest.raises(errors.InvalidArgumentError, match="for a URL"):
        clean(tmp_path, older_than=5)
    with pytest.raises(errors.InvalidArgumentError, match="older_than=-1"):
        clean(f"file://{tmp_path}", older_than=-1)
    assert clean(f"file://{tmp_path}/nothing-here") == []
