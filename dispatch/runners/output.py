"""A run's output file: capped, and never the reason a run fails.

Both runners copy the job's stdout and stderr here as it comes. Past the cap the truncation
mark is written and nothing more (`truncated`). A disk that fails (full, read-only, I/O error)
stops the writing at once: the failure is logged once (`output_write_failed`), what was
written stays, `lost` is set (and recorded as `output_lost`), and the run goes on as if
nothing happened. The job's own result decides the job; its output is a convenience.

A run's resolved secrets (`hide`) are masked in the file as they stream in
(dispatch.secrets.mask), and so are well-known credential shapes, whoever's they are
(dispatch.secrets.patterns): the job may print its environment, and this file outlives the run.
Each mask holds back what a later chunk could still complete, and `close` writes it. Past the
cap nothing is masked any more: nothing more is written. What the file takes, masked, also
goes to the run's `tail` (dispatch/records/tail.py: the newest output in Redis, for `dispatch
logs` on any machine).

The file is unbuffered (writes go straight to the kernel), so a failure surfaces at the write
that met it rather than at a later flush or at close. Writes are synchronous: small appends
to a local file, not worth a thread.

Files live in `<state dir>/output`, named `<job>.<attempt>.<fence>.log` (`output_name`): the
fence, the number in the claim's token, tells apart two runs of one attempt (a run stopped by
a shutdown and claimed again spends no attempt), so no run ever opens another's file. Releases
before the fence named them `<job>.<attempt>.log`; nothing parses the names (a record carries
its file's path), so both kinds are read and pruned alike.

`prune` removes the files last written before a cutoff (the daemon's upkeep calls it with
`DISPATCH_OUTPUT_RETENTION`), except those named in `live`: a run still going may be quiet for
longer than the retention. A file it cannot remove is counted and left, never raised.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from dispatch.log import event
from dispatch.runners.base import TRUNCATION_MARK, OutputSink
from dispatch.secrets.mask import StreamMask
from dispatch.secrets.patterns import PatternStream


class OutputFile:
    def __init__(
        self,
        path: Path,
        cap: int,
        job: str,
        *,
        hide: Iterable[str] = (),
        tail: OutputSink | None = None,
    ) -> None:
        self.path = path
        self.tail = tail
        self.job = job
        self.truncated = False
        self.lost = False
        self._left = cap
        self._file: io.FileIO | None = None
        self._mask = StreamMask(hide)
        self._shapes = PatternStream()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = io.FileIO(path, "wb")
        except OSError as exc:
            self._lose(exc)

    @property
    def writing(self) -> bool:
        """False once nothing more will be written: the cap was reached, or the disk failed."""
        return self._file is not None and not self.truncated

    def write(self, data: bytes) -> bool:
        """Append up to the cap (then the mark); the same answer as `writing` afterwards."""
        if not self.writing:  # a job past its cap may print on for hours: mask nothing more
            return False
        return self._put(self._shapes.feed(self._mask.feed(data)))

    def _put(self, data: bytes) -> bool:
        if not self.writing:
            return False
        keep = data[: self._left]
        self._left -= len(keep)
        try:
            self._write_all(keep)
            if len(keep) < len(data):
                self.truncated = True
                self._write_all(TRUNCATION_MARK)
                keep += TRUNCATION_MARK
        except OSError as exc:
            self._lose(exc)
        if self.tail is not None:  # what the file took; a lost disk still tells Redis
            self.tail.feed(keep)
        return self.writing

    def close(self) -> None:
        # the end a value or a token could still have straddled
        self._put(self._shapes.feed(self._mask.flush()) + self._shapes.flush())
        self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def _write_all(self, data: bytes) -> None:
        assert self._file is not None
        view = memoryview(data)
        while view:
            written = self._file.write(view)
            if not written:  # a regular file never takes nothing; do not spin on one that does
                raise OSError(errno.EIO, "the output file took no bytes")
            view = view[written:]

    def _lose(self, exc: OSError) -> None:
        event("output_write_failed", job=self.job, file=self.path.name, error=str(exc))
        self.lost = True
        self._close_file()


def output_dir(state_dir: Path) -> Path:
    return state_dir / "output"


def output_name(job_id: str, attempt: int, token: str) -> str:
    """The output file of one run: the job, the attempt and the claim's fence (token `<host>:<n>`,
    and host names hold no colon)."""
    return f"{job_id}.{attempt}.{token.rpartition(':')[2]}.log"


@dataclass(slots=True)
class Pruned:
    removed: int = 0
    failed: int = 0
    error: str = ""  # the first failure, for the log


def prune(directory: Path, before_ms: int, live: Collection[str]) -> Pruned:
    """Remove the output files in `directory` last written before `before_ms` (epoch ms),
    except those named in `live`. Blocking: call it in a thread."""
    pruned = Pruned()
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".log") and entry.name not in live:
                    _prune_one(entry, before_ms, pruned)
    except FileNotFoundError:  # no run has written output yet
        pass
    except OSError as exc:  # the listing itself failed: what was removed stays removed
        _failed(pruned, exc)
    return pruned


def _prune_one(entry: os.DirEntry[str], before_ms: int, pruned: Pruned) -> None:
    try:
        info = entry.stat(follow_symlinks=False)
        if not entry.is_file(follow_symlinks=False) or info.st_mtime_ns // 1_000_000 >= before_ms:
            return
        os.unlink(entry.path)
        pruned.removed += 1
    except FileNotFoundError:  # gone already (an operator's clean-up): nothing to do
        pass
    except OSError as exc:
        _failed(pruned, exc)


def _failed(pruned: Pruned, exc: OSError) -> None:
    pruned.failed += 1
    pruned.error = pruned.error or str(exc)
