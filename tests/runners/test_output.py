"""The output file: capped with a mark, and a disk that fails stops the writing, not the run;
its name."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dispatch.log import log
from dispatch.runners.base import TRUNCATION_MARK
from dispatch.runners.output import OutputFile, output_name


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(log, "stream", out)
    monkeypatch.setattr(log, "human", False)
    return out


def test_past_the_cap_the_mark_is_written_and_nothing_more(tmp_path: Path) -> None:
    out = OutputFile(tmp_path / "o" / "j.1.log", 5, "j")
    assert out.write(b"abc")
    assert not out.write(b"defgh")
    assert not out.write(b"more")
    out.close()
    assert (tmp_path / "o" / "j.1.log").read_bytes() == b"abcde" + TRUNCATION_MARK
    assert (out.truncated, out.lost) == (True, False)


def test_a_full_disk_stops_the_writing_and_says_so_once(logged: io.StringIO) -> None:
    out = OutputFile(Path("/dev/full"), 1024, "j")  # every write: ENOSPC
    assert not out.write(b"hello\n")
    assert not out.write(b"again\n")
    out.close()
    assert (out.lost, out.writing) == (True, False)
    assert logged.getvalue().count('"event":"output_write_failed"') == 1


def test_a_file_that_cannot_be_created_is_lost_from_the_start(
    tmp_path: Path, logged: io.StringIO
) -> None:
    (tmp_path / "taken").write_text("a file, not a folder")
    out = OutputFile(tmp_path / "taken" / "j.1.log", 1024, "j")
    assert (out.lost, out.write(b"x")) == (True, False)
    assert "output_write_failed" in logged.getvalue()


# -- names ------------------------------------------------------------------------


def test_a_name_carries_the_job_the_attempt_and_the_claims_fence() -> None:
    assert output_name("job.1", 3, "h1:42") == "job.1.3.42.log"
