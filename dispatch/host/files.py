"""Reading files a job, an operator or another process may have written, and writing ours.

`read_bounded` opens without blocking (a FIFO or a device left in place never hangs the
daemon), never takes a terminal as its own, reads only a regular file and at most one byte over
its limit. It follows no symlink in the last component unless asked (`follow_links=True`:
ELOOP otherwise); links in the directories above are the caller's to bound. A caller may check
the open descriptor's stat (owner, mode) before anything is read from it, so the file judged is
the file read.

`write_atomic` writes beside the target and renames over it: a reader sees the whole old file
or the whole new one, never a part.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20  # a read never asks for more: a large limit is not a large buffer


class NotRegular(OSError):
    """The path names a FIFO, a device, a directory or a socket: nothing read."""

    def __init__(self) -> None:
        super().__init__(errno.EINVAL, "not a regular file")


class TooLarge(OSError):
    """The file holds more than the reader's limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit} bytes")
        self.limit = limit


def read_bounded(
    path: str | os.PathLike[str],
    limit: int,
    follow_links: bool = False,
    check: Callable[[os.stat_result], None] | None = None,
) -> bytes:
    """A regular file's bytes, at most `limit`. OSError when it cannot be opened (a last
    symlink included, unless `follow_links`), `NotRegular`, `TooLarge`; whatever `check`
    raises, given the descriptor's stat before the regular-file test."""
    fd = os.open(path, _OPEN if follow_links else _OPEN | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if check is not None:
            check(info)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular
        data = _read_upto(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLarge(limit)
    return data


def _read_upto(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` whole: to a fresh file beside it, synced, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def allowed_folder(folder: str | None, roots: tuple[str, ...]) -> str | None:
    """The folder's real path when it is a directory under an allowed root, else None.

    Both sides are resolved, so a symlink inside a root that points outside it is caught.
    Touches the filesystem: off the event loop where a mount may be slow."""
    if not folder or not os.path.isabs(folder):
        return None
    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        return None
    for root in roots:
        real_root = os.path.realpath(root)
        if os.path.commonpath([real, real_root]) == real_root:
            return real
    return None
