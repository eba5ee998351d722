"""What a host command replied, as text fit for a log line or a record.

A reply is bytes of any encoding or none: it is decoded as UTF-8 with each undecodable byte
replaced (never an error), split into lines, each stripped, and blank lines dropped. Callers
keep a line or two of it, bounded; no reply is ever kept whole.
"""

from __future__ import annotations

from collections.abc import Iterator

from dispatch.model import one_line

LINE_CAP = 200  # characters of a line kept by `first_line`


def reply_lines(reply: bytes) -> Iterator[str]:
    """The reply's non-blank lines, decoded and stripped, in order."""
    for raw in reply.decode("utf-8", "replace").splitlines():
        if line := raw.strip():
            yield line


def first_line(reply: bytes, cap: int = LINE_CAP) -> str:
    """Its first non-blank line on one line, at most `cap` characters; "" for none."""
    line = next(reply_lines(reply), "")
    return one_line(line)[:cap]
