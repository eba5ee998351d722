"""The output file: capped with a mark, and a disk that fails stops the writing, not the run;
its name, and pruning by age."""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatch.runners.base import TRUNCATION_MARK
from dispatch.runners.output import OutputFile, Pruned, output_name, prune


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


# -- names and pruning ------------------------------------------------------------------------

DAY_MS = 86_400_000
NOW_MS = 1_700_000_000_000


def written(path: Path, at_ms: int, text: str = "out\n") -> Path:
    path.write_text(text)
    os.utime(path, ns=(at_ms * 1_000_000, at_ms * 1_000_000))
    return path


def test_a_name_carries_the_job_the_attempt_and_the_claims_fence() -> None:
    assert output_name("job.1", 3, "h1:42") == "job.1.3.42.log"


def test_prune_removes_what_was_last_written_before_the_cutoff(tmp_path: Path) -> None:
    old = NOW_MS - 15 * DAY_MS
    gone = [
        written(tmp_path / "a.1.7.log", old),
        written(tmp_path / "b.2.log", old),  # named before the fence was: pruned alike
    ]
    kept = [
        written(tmp_path / "c.1.9.log", NOW_MS - 13 * DAY_MS),
        written(tmp_path / "live.1.8.log", old),  # a quiet run that is still going
        written(tmp_path / "notes.txt", old),  # not an output file
    ]
    (tmp_path / "d.log").mkdir()
    pruned = prune(tmp_path, NOW_MS - 14 * DAY_MS, {"live.1.8.log"})
    assert (pruned.removed, pruned.failed) == (2, 0)
    assert not any(p.exists() for p in gone)
    assert all(p.exists() for p in kept) and (tmp_path / "d.log").is_dir()


def test_prune_of_a_folder_not_made_yet_is_nothing(tmp_path: Path) -> None:
    assert prune(tmp_path / "output", NOW_MS, set()) == Pruned()


@pytest.fixture
def unremovable(tmp_path: Path) -> Iterator[Path]:
    """A folder whose files cannot be removed: read-only for a user (EACCES); for root, who
    may remove anything, a tmpfs mounted read-only (EROFS)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    written(folder / "a.1.1.log", NOW_MS - 30 * DAY_MS)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True)
    try:
        written(folder / "a.1.1.log", NOW_MS - 30 * DAY_MS)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_file_that_cannot_be_removed_is_counted_not_raised(unremovable: Path) -> None:
    pruned = prune(unremovable, NOW_MS, set())
    assert (pruned.removed, pruned.failed) == (0, 1)
    assert pruned.error and (unremovable / "a.1.1.log").exists()


def test_a_folder_that_cannot_be_listed_is_counted_not_raised(tmp_path: Path) -> None:
    (tmp_path / "output").write_text("a file where the folder should be")
    pruned = prune(tmp_path / "output", NOW_MS, set())
    assert (pruned.removed, pruned.failed) == (0, 1)
    assert "Not a directory" in pruned.error
