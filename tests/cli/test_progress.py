"""loaderx.progress: silent off a terminal, a bar or plain lines on one, and
events for a callback; Reader.verify reports the stored bytes it checked."""

import io
import sys

import numpy as np
import pytest

import loaderx.zrecord._reader as zrecord_reader
from loaderx import progress
from loaderx.errors import ZrecordError
from loaderx.progress import ProgressEvent
from loaderx.zrecord import Dense, Ragged, RaggedBatch


class Terminal(io.StringIO):
    def isatty(self):
        return True


def run(arg, total=10, steps=(3, 3, 4), unit="rows"):
    with progress.task("job", total=total, unit=unit, progress=arg) as p:
        for n in steps:
            p.advance(n)
    return p


def test_callback_gets_start_steps_and_finish():
    events = []
    run(events.append)
    assert events == [
        ProgressEvent("job", "rows", 0, 10),
        ProgressEvent("job", "rows", 3, 10),
        ProgressEvent("job", "rows", 6, 10),
        ProgressEvent("job", "rows", 10, 10),
        ProgressEvent("job", "rows", 10, 10, finished=True),
    ]


def test_a_row_task_can_count_the_bytes_its_rows_hold(monkeypatch):
    events = []
    with progress.task("job", total=5, unit="rows", progress=events.append) as p:
        p.advance(2, nbytes=100)
        p.advance(3, nbytes=28)
    assert p.nbytes == 128
    assert events == [
        ProgressEvent("job", "rows", 0, 5),
        ProgressEvent("job", "rows", 2, 5, nbytes=100),
        ProgressEvent("job", "rows", 5, 5, nbytes=128),
        ProgressEvent("job", "rows", 5, 5, finished=True, nbytes=128),
    ]
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(progress, "_stderr_is_terminal", lambda: True)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # the plain lines
    with progress.task("job", total=5, unit="rows", progress=True) as p:
        p.advance(5, nbytes=3 * 2**20)
    line = err.getvalue()
    assert line.startswith("job: 5 rows / 5 rows (100%, ") and " 3.0 MiB, " in line, line


def test_a_failed_task_sends_no_finished_event():
    events = []
    with (
        pytest.raises(KeyError),
        progress.task("job", total=None, unit="bytes", progress=events.append) as p,
    ):
        p.advance(5)
        raise KeyError("stop")
    assert events == [
        ProgressEvent("job", "bytes", 0, None),
        ProgressEvent("job", "bytes", 5, None),
    ]


@pytest.mark.parametrize("arg", [False, None, True])
def test_silent_when_off_or_stderr_is_not_a_terminal(arg, monkeypatch):
    err = io.StringIO()  # isatty() is False
    monkeypatch.setattr(sys, "stderr", err)
    assert run(arg).done == 10
    assert err.getvalue() == ""


def test_tqdm_bar_on_a_terminal(monkeypatch):
    pytest.importorskip("tqdm", reason="tqdm (the cli extra) draws the bar")
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    run(True, total=3 << 20, steps=(1 << 20, 2 << 20), unit="bytes")
    out = err.getvalue()
    assert "job: 100%" in out and "3.00M/3.00M" in out


def test_plain_lines_without_tqdm(monkeypatch):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    run(True, total=3 << 20, steps=(1 << 20, 2 << 20), unit="bytes")
    lines = err.getvalue().splitlines()
    assert len(lines) == 3  # two steps and the end
    assert lines[0].startswith("job: 1.0 MiB / 3.0 MiB (33%, ")
    assert "ETA " in lines[0]
    assert lines[-1].startswith("job: 3.0 MiB / 3.0 MiB (100%, ")
    assert "ETA" not in lines[-1]


def test_plain_lines_are_periodic(monkeypatch):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 3600.0)
    run(True, total=None, steps=(1, 2, 3), unit="records")
    # Only the final line: the steps came within the interval.
    [line] = err.getvalue().splitlines()
    assert line.startswith("job: 6 records (") and line.endswith(" records/s)")


def test_bad_arguments():
    with pytest.raises(TypeError, match="progress must be a bool, None or a callable"):
        progress.task("job", total=1, unit="rows", progress="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unit must be one of"):
        progress.task("job", total=1, unit="items", progress=False)  # type: ignore[arg-type]


def test_verify_reports_the_stored_bytes_in_steps(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    with Dense.create(tmp_path / "d", np.int32, (256,), codec="zstd", data_shards=3) as w:
        w.append(rng.integers(0, 50, (300, 256), dtype=np.int32))
    r = Dense.open(tmp_path / "d")
    stored = r.record_sizes().stored
    total = int(stored.sum())
    assert total == sum((tmp_path / "d" / f"data-00{k}.bin").stat().st_size for k in range(3))
    monkeypatch.setattr(zrecord_reader, "VERIFY_STEP_BYTES", 10_000)
    monkeypatch.setattr(zrecord_reader, "INDEX_STEP", 64)
    events = []
    r.verify(progress=events.append)
    done = [e.done for e in events]
    assert events[0] == ProgressEvent(f"verify {tmp_path / 'd'}", "bytes", 0, total)
    assert events[-1].finished and done[-1] == total
    assert done == sorted(done) and len(events) > total // 10_000
    # Every step ends on a record boundary.
    ends = set(np.cumsum(stored).tolist())
    assert all(d in ends for d in done[1:])


def test_verify_with_progress_names_the_damaged_record(tmp_path):
    records = [np.full(n, n, dtype=np.int64) for n in (5, 9, 2, 7)]
    with Ragged.create(tmp_path / "r", np.int64, ndim=1, codec="raw", data_shards=1) as w:
        w.append(RaggedBatch.from_records(records))
    data = tmp_path / "r" / "data-000.bin"
    raw = bytearray(data.read_bytes())
    raw[(5 + 9) * 8 + 3] ^= 1  # inside record 2
    data.write_bytes(bytes(raw))
    events = []
    with pytest.raises(ZrecordError) as info:
        Ragged.open(tmp_path / "r").verify(progress=events.append)
    assert info.value.record == 2 and str(info.value.path) == str(data)
    assert not any(e.finished for e in events)


def test_verify_of_an_empty_store_with_progress(tmp_path):
    Dense.create(tmp_path / "e", np.uint8, (), codec="zstd").close()
    events = []
    Dense.open(tmp_path / "e").verify(progress=events.append)
    assert events == [
        ProgressEvent(f"verify {tmp_path / 'e'}", "bytes", 0, 0),
        ProgressEvent(f"verify {tmp_path / 'e'}", "bytes", 0, 0, finished=True),
    ]


def test_native_record_ranges_are_checked(tmp_path):
    from loaderx.errors import InvalidArgumentError

    with Dense.create(tmp_path / "d", np.uint8, (3,), codec="raw") as w:
        w.append(np.zeros((4, 3), np.uint8))
    store = Dense.open(tmp_path / "d")._store()
    for start, stop in ((3, 2), (0, 5)):
        with pytest.raises(InvalidArgumentError, match=f"records {start}..{stop} are not a range"):
            store.verify_records(start, stop)
        with pytest.raises(InvalidArgumentError, match=f"records {start}..{stop} are not a range"):
            store.record_sizes(start, stop)
    logical, stored = store.record_sizes(4, 4)
    assert logical.size == stored.size == 0
