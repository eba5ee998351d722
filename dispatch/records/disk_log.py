"""Run records on this host's disk: append-only JSON lines in the state dir, rotated by size.

The fleet-wide copy lives in Redis, in each queue's `runs` hash: `mirror.RunMirror` stores a
started run's record before its claim ends, and the finishing script stores the others (refusals,
runs that never started, a record whose early write failed). This file is the host's own
history, which outlives any retention there.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

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
        state_dir.mkdir(parents=True, exist_ok=True)

    def append(self, lines: Iterable[bytes]) -> None:
        """Write encoded records in one write: a batch of completions costs one syscall.

        The file stays open between batches (O_APPEND: each write lands whole at the end)."""
        blob = b"".join(line + b"\n" for line in lines)
        if not blob:
            return
        if self._file is None:
            self._file = io.FileIO(self.path, "ab")
        view = memoryview(blob)
        while view:
            view = view[self._file.write(view) or 0 :]
        if self._file.tell() >= self.rotate_bytes:
            self.close()
            self._rotate()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _rotate(self) -> None:
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
