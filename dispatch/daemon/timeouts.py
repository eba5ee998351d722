"""Job timeouts on a coarse wheel: one loop timer per tick of deadlines, not one per job.

A timer of its own per job (a handle, a libuv timer started and stopped) cost about 4 us, a
twentieth of a no-op job's daemon time, for a deadline of minutes that needs no better than a
tenth of a second. Deadlines are rounded up to the next tick, so a timeout never fires early
and at most one tick late. A tick whose runs all ended fires once, finding nothing.
"""

from __future__ import annotations

import asyncio
import math

from dispatch.reasons import JOB_TIMEOUT
from dispatch.runners.base import AbortSignal

TICK_S = 0.1


class Timeouts:
    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._due: dict[int, set[AbortSignal]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self, after_s: float, signal: AbortSignal) -> int:
        """Abort `signal` with `job-timeout` once `after_s` have passed; the ticket disarms it."""
        loop = self._loop
        if loop is None or loop.is_closed():  # asking costs a getpid() syscall on 3.11
            loop = self._loop = asyncio.get_running_loop()
        tick = math.ceil((loop.time() + after_s) / self.tick_s)
        due = self._due.get(tick)
        if due is None:
            due = self._due[tick] = set()
            loop.call_at(tick * self.tick_s, self._fire, tick)
        due.add(signal)
        return tick

    def disarm(self, ticket: int, signal: AbortSignal) -> None:
        due = self._due.get(ticket)
        if due is not None:
            due.discard(signal)

    def _fire(self, tick: int) -> None:
        for signal in self._due.pop(tick, ()):
            signal.abort(JOB_TIMEOUT)

    def __len__(self) -> int:
        """Runs armed now."""
        return sum(map(len, self._due.values()))
