"""Structured logging: one JSON object per line, or a readable line on a TTY.

    log.event("job_started", job=job.id, attempt=2)

Event names are fixed snake_case text; values go in fields. Fields whose name looks secret are
redacted, and nothing here ever prints a full host path on purpose (callers pass basenames).
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any, TextIO

import msgspec

_SECRET = re.compile(r"(pass|secret|token|key|auth|credential)", re.IGNORECASE)
_encoder = msgspec.json.Encoder()


def redact(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: ("***" if _SECRET.search(k) and v else v) for k, v in fields.items()}


class Logger:
    def __init__(self, stream: TextIO | None = None, human: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.human = self.stream.isatty() if human is None else human
        self.context: dict[str, Any] = {}

    def event(self, name: str, **fields: Any) -> None:
        fields = redact({**self.context, **fields})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        if self.human:
            rest = " ".join(f"{k}={v}" for k, v in fields.items())
            line = f"{stamp} {name} {rest}".rstrip()
        else:
            line = _encoder.encode({"ts": stamp, "event": name, **fields}).decode()
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must never take the daemon down


log = Logger()
event = log.event
