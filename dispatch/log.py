"""Structured logging: one JSON object per line, or a readable line on a TTY.

    log.event("job_started", job=job.id, attempt=2)

Event names are fixed snake_case text; values go in fields. Fields whose name looks secret are
redacted, and nothing here ever prints a full host path on purpose (callers pass basenames).

Values known to be secret (a job's resolved secrets, while its run lasts) are hidden: `hide`
adds them to one process-wide set, `unhide` takes them out again (counted, so two jobs sharing
a value do not unmask each other), and every line is scrubbed of each, raw or JSON-escaped,
before it is written, whatever field or nesting carried it.

Every line is then scrubbed of well-known credential shapes (`ghp_...`, `sk-...`, a JWT, an
Authorization header, a private key: dispatch.secrets.patterns), whoever put them there: a job's
plain env value, an engine's message quoting it. A line without any costs about 2 us more.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import msgspec

from dispatch.secrets.patterns import scrub_patterns

_SECRET = re.compile(r"(pass|secret|token|key|auth|credential)", re.IGNORECASE)
_encoder = msgspec.json.Encoder()
MASK = "***"
_hidden: dict[str, int] = {}  # text -> how many holders asked to hide it
_longest_first: list[str] = []


def _forms(value: str) -> set[str]:
    """The value as a line may spell it: raw, and escaped inside a JSON string."""
    return {value, _encoder.encode(value).decode()[1:-1]} - {""}


def hide(values: Iterable[str]) -> None:
    for value in values:
        for form in _forms(value):
            _hidden[form] = _hidden.get(form, 0) + 1
    _sort()


def unhide(values: Iterable[str]) -> None:
    for value in values:
        for form in _forms(value):
            left = _hidden.pop(form, 0) - 1
            if left > 0:
                _hidden[form] = left
    _sort()


def _sort() -> None:
    # longest first: a value that contains another is masked whole
    _longest_first[:] = sorted(_hidden, key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every hidden value masked."""
    for form in _longest_first:
        if form in text:
            text = text.replace(form, MASK)
    return text


def redact(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: ("***" if _SECRET.search(k) and v else v) for k, v in fields.items()}


class Logger:
    def __init__(self, stream: TextIO | None = None, human: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.human = self.stream.isatty() if human is None else human
        self.context: dict[str, Any] = {}
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []  # metrics count them

    def event(self, name: str, **fields: Any) -> None:
        for listener in self.listeners:
            listener(name, fields)
        fields = redact({**self.context, **fields})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        if self.human:
            rest = " ".join(f"{k}={v}" for k, v in fields.items())
            line = f"{stamp} {name} {rest}".rstrip()
        else:
            line = _encoder.encode({"ts": stamp, "event": name, **fields}).decode()
        if _longest_first:
            line = scrub(line)
        line = scrub_patterns(line)
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must never take the daemon down


log = Logger()
event = log.event
