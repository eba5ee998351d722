"""Bounded reads and whole writes on real files, links, FIFOs and directories."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from dispatch.host.files import NotRegular, TooLarge, read_bounded, write_atomic


def test_a_regular_file_is_read_whole_up_to_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_bounded(path, 10) == b"x" * 10
    assert read_bounded(str(path), 11) == b"x" * 10


def test_one_byte_over_the_limit_is_too_large(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    with pytest.raises(TooLarge) as caught:
        read_bounded(path, 10)
    assert (caught.value.errno, caught.value.limit) == (errno.EFBIG, 10)
    assert caught.value.strerror == "larger than 10 bytes"


def test_a_file_larger_than_one_read_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = os.urandom(3 << 20)
    path.write_bytes(data)
    assert read_bounded(path, len(data)) == data


def test_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"secret")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(OSError) as caught:
        read_bounded(tmp_path / "link", 100)
    assert caught.value.errno == errno.ELOOP


def test_a_symlink_is_followed_when_asked(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"named")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert read_bounded(tmp_path / "link", 100, follow_links=True) == b"named"


def test_a_link_above_the_last_component_is_the_callers_to_bound(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"ok")
    (tmp_path / "dir").symlink_to(tmp_path / "real")
    assert read_bounded(tmp_path / "dir" / "f", 100) == b"ok"


def test_a_fifo_is_not_read_and_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would hang here
    with pytest.raises(NotRegular) as caught:
        read_bounded(fifo, 100)
    assert (caught.value.errno, caught.value.strerror) == (errno.EINVAL, "not a regular file")


def test_a_directory_is_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(NotRegular):
        read_bounded(tmp_path, 100)


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "none", 100)


def test_the_check_sees_the_descriptors_stat_before_anything_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"value")
    path.chmod(0o640)
    seen: list[int] = []

    def private(st: os.stat_result) -> None:
        seen.append(stat.S_IMODE(st.st_mode))
        if st.st_mode & 0o077:
            raise ValueError("not private")

    with pytest.raises(ValueError, match="not private"):
        read_bounded(path, 100, check=private)
    path.chmod(0o600)
    assert read_bounded(path, 100, check=private) == b"value"
    assert seen == [0o640, 0o600]


def test_the_check_runs_before_the_regular_file_test(tmp_path: Path) -> None:
    def refuse(st: os.stat_result) -> None:
        raise ValueError("its own words")

    with pytest.raises(ValueError, match="its own words"):
        read_bounded(tmp_path, 100, check=refuse)


def test_write_atomic_writes_a_new_file_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    write_atomic(path, b"{}\n", mode=0o600)
    assert path.read_bytes() == b"{}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 & ~_umask()
    assert os.listdir(tmp_path) == ["f.json"]


def test_write_atomic_replaces_the_old_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old contents")
    before = path.stat().st_ino
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert path.stat().st_ino != before  # a new file renamed over it, not rewritten in place


def test_write_atomic_replaces_a_symlink_not_its_target(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"kept")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    write_atomic(tmp_path / "link", b"new")
    assert (tmp_path / "target").read_bytes() == b"kept"
    assert not (tmp_path / "link").is_symlink()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def _umask() -> int:
    """The process's umask, read without setting it (Linux 4.7 and later)."""
    status = Path("/proc/self/status").read_text()
    return int(
        next(line for line in status.splitlines() if line.startswith("Umask:")).split()[1], 8
    )
