"""Run records on this host's disk: append-only JSON lines in the state dir, rotated by size.

The fleet-wide copy lives in Redis, in each queue's `runs` hash: `mirror.RunMirror` stores a
started run's record before its claim ends, and the finishing script stores the others (refusals,
runs that never started, a record whose early write failed). This file is the host's own
history, which outlives any retention there.

A disk that fails (full, read-only, I/O error) must not stop the daemon or hold up a finished
claim: the records of a failed write are dropped from this file (Redis has them), the failure
is logged once per streak (`run_log_write_failed`, then `run_log_write_recovered` with the
count dropped), and the file is opened again at the next write. A write cut short leaves a
torn line; the next write begins on a fresh line, so only that record is lost, and `read`
skips it. The same check runs when the file is first opened, for a line a crash tore.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from dispatch.log import event
from dispatch.model import RunRecord, encoder

ROTATE_BYTES = 32 * 1024 * 1024
KEEP_FILES = 5

_decoder = msgspec.json.Decoder(RunRecord)


def encode(record: RunRecord) -> bytes:
    return encoder.encode(record)


def decode(raw: bytes | str) -> RunRecord:
    return _decoder.decode(raw)


class RecordLog:
    def __init__(self, state_dir: Path, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.path = state_dir / "runs.jsonl"
        self.rotate_bytes = rotate_bytes
        self._file: io.FileIO | None = None
        self._dropped = 0  # records lost in the current failure streak; 0 when writes succeed
        self._soon: list[bytes] = []  # records of this loop tick, written together at its end
        state_dir.mkdir(parents=True, exist_ok=True)

    def append_soon(self, line: bytes) -> None:
        """Queue one record for a write at the end of this loop tick, with the others of the
        tick: callbacks run in the order they were scheduled, so it is on disk before anything
        its caller sends after its next await (the mirror's write, the finish)."""
        self._soon.append(line)
        if len(self._soon) == 1:
            asyncio.get_running_loop().call_soon(self._write_soon)

    def _write_soon(self) -> None:
        if self._soon:
            self.append(())

    def append(self, lines: Iterable[bytes]) -> bool:
        """Write encoded records in one write: a batch of completions costs one syscall.

        The file stays open between batches (O_APPEND: each write lands whole at the end).
        False when the disk failed them: they were dropped here, and logged."""
        records, self._soon = [*self._soon, *lines], []
        blob = b"".join(line + b"\n" for line in records)
        if not blob:
            return True
        try:
            self._write(blob)
        except OSError as exc:
            self._failed(exc, len(records))
            return False
        if self._dropped:
            event("run_log_write_recovered", file=self.path.name, dropped=self._dropped)
            self._dropped = 0
        return True

    def _write(self, blob: bytes) -> None:
        if self._file is None:
            self._file = io.FileIO(self.path, "a+")  # + : the tail is read for a torn line
            blob = self._fresh_line() + blob
        view = memoryview(blob)
        while view:
            written = self._file.write(view)
            if not written:  # a regular file never takes nothing; do not spin on one that does
                raise OSError(errno.EIO, "the run log took no bytes")
            view = view[written:]
        if self._file.tell() >= self.rotate_bytes:
            self.close()
            self._rotate()

    def _rotate(self) -> None:
        """Shift the older files up by one; one that cannot be moved leaves the file growing,
        and the rotation is tried again after the next write."""
        try:
            self._shift()
        except OSError as exc:
            event("run_log_rotate_failed", file=self.path.name, error=str(exc))

    def _fresh_line(self) -> bytes:
        """A newline when the file ends in a torn line (a cut-short write, a crash)."""
        assert self._file is not None
        size = os.fstat(self._file.fileno()).st_size
        if size == 0:
            return b""
        return b"" if os.pread(self._file.fileno(), 1, size - 1) == b"\n" else b"\n"

    def _failed(self, exc: OSError, records: int) -> None:
        if not self._dropped:
            event("run_log_write_failed", file=self.path.name, error=str(exc))
        self._dropped += records
        self.close()  # opened again, and checked for a torn line, at the next write

    def close(self) -> None:
        self._write_soon()
        if self._file is not None:
            with contextlib.suppress(OSError):  # nothing is buffered: nothing to lose here
                self._file.close()
            self._file = None

    def _shift(self) -> None:
        for n in range(KEEP_FILES - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{n + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self.path.with_name(f"{self.path.name}.{KEEP_FILES + 1}").unlink(missing_ok=True)

    def read(self) -> Iterator[RunRecord]:
        """Every readable record of the current file, oldest first; a torn line is skipped."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for line in f:
                try:
                    yield decode(line)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
