"""The overview's one source, shared by every open page and event stream.

A frame is the fleet snapshot (dispatch/fleet/view.py) with what `status` adds from this
machine's config files (spend, triggers). The feed reads one at most every `every_s`, only
when someone asks, and one read at a time: ten browsers on the overview cost Redis what one
does. A read that fails keeps the last good frame and says since when and why it is stale.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

from dispatch.cli.fleet_extras import Extras
from dispatch.fleet.view import Snapshot

Read = Callable[[], Awaitable[tuple[Snapshot, Extras]]]


@dataclass(frozen=True)
class Frame:
    seq: int  # one more for every read, good or not
    snap: Snapshot
    extras: Extras
    stale: str = ""  # why this frame is older than a read: the failed read's reason
    stale_since: float = 0.0  # monotonic time of the first failed read
    read_s: float = 0.0  # how long the read that made it took


class Feed:
    def __init__(
        self, read: Read, every_s: float = 1.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._read = read
        self.every_s = every_s
        self._now = monotonic
        self._frame: Frame | None = None
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()
        self.reads = 0

    async def latest(self) -> Frame:
        if (frame := self._fresh()) is not None:
            return frame
        async with self._lock:  # whoever waited here finds the frame the first one read
            if (frame := self._fresh()) is None:
                frame = await self._refresh()
        return frame

    def due_in(self) -> float:
        """Seconds until the frame in hand is due for a read (a stream sleeps this long, so it
        never wakes just before the read and waits a whole period more)."""
        return max(self._read_at + self.every_s - self._now(), 0.0) + 0.001

    def expire(self) -> None:
        """The next ask reads again: something was just changed from this page."""
        self._read_at = float("-inf")

    def _fresh(self) -> Frame | None:
        if self._frame is not None and self._now() - self._read_at < self.every_s:
            return self._frame
        return None

    async def _refresh(self) -> Frame:
        started = self._now()
        snap, extras = await self._read()
        self.reads += 1
        before = self._frame
        seq = before.seq + 1 if before else 1
        took = self._now() - started
        if snap.error and before is not None and not before.snap.error:
            since = before.stale_since or started
            frame = replace(before, seq=seq, stale=snap.error, stale_since=since, read_s=took)
        else:
            frame = Frame(seq, snap, extras, stale=snap.error, read_s=took)
            if snap.error:
                frame = replace(frame, stale_since=before.stale_since if before else started)
        self._frame, self._read_at = frame, self._now()
        return frame

    def stale_for(self, frame: Frame) -> float:
        return self._now() - frame.stale_since if frame.stale else 0.0


async def changes(
    feed: Feed, render: Callable[[Frame], str], keepalive_s: float = 15.0
) -> AsyncIterator[str]:
    """Server-sent events: the rendered overview each time it differs from the last one sent,
    and a comment line every `keepalive_s` so proxies keep a quiet stream open."""
    sent = ""
    quiet = 0.0
    while True:
        frame = await feed.latest()
        html = render(frame)
        if html != sent:
            sent, quiet = html, 0.0
            yield event("overview", html)
        elif quiet >= keepalive_s:
            quiet = 0.0
            yield ": still here\n\n"
        pause = feed.due_in()
        await asyncio.sleep(pause)
        quiet += pause


def event(name: str, data: str) -> str:
    """One event: each line of `data` on its own `data:` line, as the format wants (a carriage
    return would end a line too: none is sent)."""
    lines = "".join(f"data: {line}\n" for line in data.replace("\r", "").split("\n"))
    return f"event: {name}\n{lines}\n"
