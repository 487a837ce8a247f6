"""A failed local engine write removes its build directory even while a task of
the failed job still writes its part into it: an engine aborts a job before
its other tasks have stopped, and one such task's files, made while the
directory was being removed, left it behind (a Spark job of the test suite
failed so, with the build directory and its parts left)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from loaderx._engine._publish import local_build


def late_task(parts: str, stop: threading.Event) -> None:
    """Writes part after part as a task does: a temporary directory of files in
    the parts directory, while that directory is there."""
    k = 0
    while not stop.is_set():
        tmp = os.path.join(parts, f".p{k:06d}.tmp")
        try:
            os.mkdir(tmp)
            for i in range(20):
                with open(os.path.join(tmp, f"f{i}"), "wb") as f:
                    f.write(b"x" * 4096)
        except FileNotFoundError:
            return  # the parts directory is gone: the task fails
        k += 1


def test_a_failed_write_leaves_no_build_directory_while_a_task_still_writes(tmp_path):
    dest = str(tmp_path / "got")
    for _ in range(20):
        stop = threading.Event()
        with pytest.raises(RuntimeError, match="the job failed"):
            with local_build(dest) as (_build, parts):
                task = threading.Thread(target=late_task, args=(parts, stop))
                task.start()
                time.sleep(0.02)
                raise RuntimeError("the job failed")
        stop.set()
        task.join()
        assert os.listdir(tmp_path) == []
