"""Masking resolved secret values in what dispatch writes.

`forms` is what counts as the value: the value itself and, for a multi-line value (a PEM key),
each of its lines, so a job printing the key line by line is masked too. Every form is at least
`MIN_CHARS` long: the resolver refuses shorter values (masking "ab" would wreck every line that
holds those two letters, and would protect nothing).

`StreamMask` masks a byte stream that arrives cut at arbitrary points (a job's output): it holds
back the last `longest - 1` bytes of each chunk, so a value split across two chunks is still
seen whole, and gives them back at `flush`.
"""

from __future__ import annotations

from collections.abc import Iterable

MIN_CHARS = 4
MASK = b"***"


def forms(values: Iterable[str]) -> list[str]:
    """Each value and the lines of a multi-line one, at least MIN_CHARS long, longest first."""
    found: set[str] = set()
    for value in values:
        found.add(value)
        if "\n" in value:
            found.update(line.rstrip("\r") for line in value.split("\n"))
    return sorted((f for f in found if len(f) >= MIN_CHARS), key=len, reverse=True)


class StreamMask:
    def __init__(self, values: Iterable[str]) -> None:
        self._needles = [f.encode() for f in forms(values)]
        self._keep = max((len(n) for n in self._needles), default=1) - 1
        self._tail = b""

    def feed(self, data: bytes) -> bytes:
        """What of `data` can be written now, masked; the rest waits for the next chunk."""
        if not self._needles:
            return data
        buf = self._tail + data
        for needle in self._needles:
            if needle in buf:
                buf = buf.replace(needle, MASK)
        # a value that starts before the cut ends inside `buf`, so it was masked above
        cut = max(len(buf) - self._keep, 0)
        self._tail = buf[cut:]
        return buf[:cut]

    def flush(self) -> bytes:
        """The bytes held back, at the end of the stream."""
        tail, self._tail = self._tail, b""
        return tail
