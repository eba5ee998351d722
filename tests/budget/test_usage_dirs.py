"""Report directories are reused only when a run left them as they were handed out: empty,
0777, ours. Real filesystem."""

from __future__ import annotations

import os
from pathlib import Path

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
