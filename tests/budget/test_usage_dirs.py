"""Report directories are reused only when a run left them as they were handed out: empty,
0777, ours. Real filesystem."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dispatch.budget.usage import UsageDirs


def test_a_clean_directory_goes_to_the_next_run(tmp_path: Path) -> None:
    dirs = UsageDirs(tmp_path / "usage")
    first = dirs.take()
    assert first is not None and first.parent == tmp_path / "usage"
    (first / "a.json").write_text('{"costUsd": 0.5}')
    usage = dirs.read_and_return(first, "a.json", "j1")
    assert usage.usd_micro == 500_000
    assert list(first.iterdir()) == []  # the report is read once, then gone
    assert dirs.take() == first


def test_a_directory_with_anything_else_left_in_it_is_removed(tmp_path: Path) -> None:
    dirs = UsageDirs(tmp_path / "usage")
    first = dirs.take()
    assert first is not None
    (first / "b.json").write_text('{"costUsd": 9}')  # a writer aiming at another run's name
    assert dirs.read_and_return(first, "a.json", "j1").usd_micro is None
    assert not first.exists()
    second = dirs.take()
    assert second is not None and second != first and list(second.iterdir()) == []


def test_a_directory_whose_mode_changed_is_removed(tmp_path: Path) -> None:
    dirs = UsageDirs(tmp_path / "usage")
    first = dirs.take()
    assert first is not None
    os.chmod(first, 0o700)  # a job running as root took it for itself
    dirs.read_and_return(first, "a.json", "j1")
    assert not first.exists()


def test_a_leftover_of_an_earlier_daemon_is_emptied_before_use(tmp_path: Path) -> None:
    root = tmp_path / "usage"
    (root / "slot-1").mkdir(parents=True)
    (root / "slot-1" / "old.json").write_text('{"costUsd": 9}')
    taken = UsageDirs(root).take()
    assert taken == root / "slot-1" and list(taken.iterdir()) == []
    assert os.stat(taken).st_mode & 0o777 == 0o777


def quiet_dir(dirs: UsageDirs) -> Path:
    """A directory lent after it was left unchanged for the settle time (real clock)."""
    first = dirs.take()
    assert first is not None
    dirs.read_and_return(first, "a.json", "j0")  # seen clean: stamped
    changed_ns = os.lstat(first).st_ctime_ns
    deadline = time.monotonic() + 5
    while time.time_ns() - changed_ns < dirs.settled_ns:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    again = dirs.take()
    assert again == first
    return again


def test_a_quiet_directory_left_as_lent_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = UsageDirs(tmp_path / "usage", settled_s=0.05)
    run_dir = quiet_dir(dirs)
    monkeypatch.setattr(os, "listdir", _no_listing)
    assert dirs.read_and_return(run_dir, "b.json", "j1").usd_micro is None
    assert dirs.take() == run_dir  # back, with one lstat


@pytest.mark.parametrize("change", ["report", "stray file", "subdir", "mode"])
def test_anything_done_in_a_quiet_directory_is_seen(tmp_path: Path, change: str) -> None:
    dirs = UsageDirs(tmp_path / "usage", settled_s=0.05)
    run_dir = quiet_dir(dirs)
    if change == "report":
        (run_dir / "b.json").write_text('{"costUsd": 0.25}')
        assert dirs.read_and_return(run_dir, "b.json", "j1").usd_micro == 250_000
        assert list(run_dir.iterdir()) == [] and dirs.take() == run_dir
        return
    if change == "stray file":
        (run_dir / "left.txt").write_text("for the next job")
    elif change == "subdir":
        (run_dir / "d").mkdir()
    else:
        os.chmod(run_dir, 0o700)
    dirs.read_and_return(run_dir, "b.json", "j1")
    assert not run_dir.exists()  # none of it reaches another run


def _no_listing(path: object) -> list[str]:
    raise AssertionError("listed")
