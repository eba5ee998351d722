"""The clock, injected so tests of hours run in milliseconds.

Queue times (due, lock deadlines) come from the Redis server's TIME inside the scripts; this
clock serves only local decisions: timers, durations, record instants. `ServerTime` is this
clock set right by its measured offset to the server's TIME, for the decisions a fleet must
agree on without a script (the trigger minter; dispatch/fleet/skew.py says how it is measured).
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock epoch milliseconds."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes back."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = start_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._ms += int(seconds * 1000)
        self._mono += seconds


class TimeSource(Protocol):
    def time(self) -> Any:
        """Awaitable: the server's TIME, (seconds, microseconds)."""
        ...


class ServerTime:
    """This host's clock, set right by the last measured offset to the server's TIME."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.offset_ms: int | None = None  # server - host; None until first measured

    def note(self, reply: Any, sent_ms: int, got_ms: int) -> None:
        """Keep the offset a TIME `reply` (seconds, microseconds) gives, sent and answered at
        those host instants."""
        seconds, micros = int(reply[0]), int(reply[1])
        server_ms = seconds * 1000 + micros // 1000
        self.offset_ms = server_ms - (sent_ms + got_ms) // 2

    async def measure(self, redis: TimeSource) -> None:
        sent = self.clock.now_ms()
        reply = await redis.time()
        self.note(reply, sent, self.clock.now_ms())

    async def now_ms(self, redis: TimeSource) -> int:
        """The server's instant as this host reckons it (measured first if never yet)."""
        if self.offset_ms is None:
            await self.measure(redis)
        return self.clock.now_ms() + (self.offset_ms or 0)
