"""Report directories are reused only when a run left them as they were handed out: empty,
0777, ours. Real filesystem."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dispatch.spend.usage_report import UsageDirs


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
    while time.time_ns() - changed_ns < dirs.settle_ns(changed_ns):
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
    assert dirs.take() == run_dir  # back, with one fstat


@pytest.mark.parametrize("change", ["report", "stray file", "subdir", "mode", "replaced"])
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
    elif change == "replaced":  # another directory at its path: the kept descriptor sees it
        run_dir.rename(run_dir.with_name("away"))
        run_dir.mkdir(mode=0o777)
        (run_dir / "left.txt").write_text("for the next job")
    else:
        os.chmod(run_dir, 0o700)
    dirs.read_and_return(run_dir, "b.json", "j1")
    assert not run_dir.exists()  # none of it reaches another run


def _no_listing(path: object) -> list[str]:
    raise AssertionError("listed")


def test_one_descriptor_is_kept_per_clean_directory(tmp_path: Path) -> None:
    dirs = UsageDirs(tmp_path / "usage")
    opened = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        taken = [dirs.take() for _ in range(3)]
        for i, run_dir in enumerate(taken):
            dirs.read_and_return(run_dir, f"r{i}.json", "j")
    assert len(os.listdir("/proc/self/fd")) == opened + 3
    run_dir = dirs.take()
    assert run_dir is not None
    (run_dir / "stray").write_text("x")
    dirs.read_and_return(run_dir, "r.json", "j")  # removed, and its descriptor closed
    assert len(os.listdir("/proc/self/fd")) == opened + 2
    dirs.close()
    assert len(os.listdir("/proc/self/fd")) == opened
    again = dirs.take()  # after the close a directory is judged by listing it
    assert again is not None
    (again / "stray").write_text("x")
    dirs.read_and_return(again, "r.json", "j")
    assert not again.exists()


def test_stamps_finer_than_10_ms_settle_in_a_tenth_of_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = UsageDirs(tmp_path / "usage")  # 2 s where stamps are whole seconds
    assert dirs.settle_ns(1_700_000_000 * 10**9) == 2 * 10**9
    assert dirs.settle_ns(1_700_000_000 * 10**9 + 20_000_000) == 2 * 10**9  # 10 ms stamps
    assert dirs.settle_ns(1_700_000_000 * 10**9 + 123_456_789) == 10**8
    run_dir = quiet_dir(dirs)  # lent quiet once its settle time has passed
    assert dirs.settle_ns(os.lstat(run_dir).st_ctime_ns) == 10**8  # this filesystem's are fine
    monkeypatch.setattr(os, "listdir", _no_listing)
    assert dirs.read_and_return(run_dir, "b.json", "j1").usd_micro is None
    assert dirs.take() == run_dir
