"""The host's run log when the disk fails: records dropped (Redis has them), logged once per
failure streak, and a torn line never swallows the next record."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatch.model import RunRecord
from dispatch.records.disk_log import RecordLog, encode


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[RecordLog]:
    log_ = RecordLog(tmp_path)
    try:
        yield log_
    finally:
        log_.close()


def record(n: int) -> bytes:
    return encode(RunRecord(id=f"j{n}", attempt=1, host="h", queue="jobs", outcome="completed"))


def test_a_full_disk_drops_the_records_and_says_so_once_per_streak(
    runs: RecordLog, logged: io.StringIO
) -> None:
    runs.path.symlink_to("/dev/full")  # every write: ENOSPC
    assert not runs.append([record(1)])
    assert not runs.append([record(2), record(3)])
    assert logged.getvalue().count('"event":"run_log_write_failed"') == 1
    runs.path.unlink()  # space again
    assert runs.append([record(4)])
    assert '"event":"run_log_write_recovered"' in logged.getvalue()
    assert '"dropped":3' in logged.getvalue()
    assert [r.id for r in runs.read()] == ["j4"]
    assert not runs.path.with_name("runs.jsonl.1").exists()


def test_the_next_record_starts_on_a_fresh_line_after_a_torn_one(runs: RecordLog) -> None:
    assert runs.append([record(1)])
    runs.close()
    with runs.path.open("ab") as f:  # a write cut short by a full disk, or a crash
        f.write(record(2)[:20])
    assert runs.append([record(3)])
    assert [r.id for r in runs.read()] == ["j1", "j3"]


def test_an_empty_batch_writes_nothing(runs: RecordLog) -> None:
    assert runs.append([])
    assert not runs.path.exists()
