"""Background tasks of the daemon: supervised, periodic, and stopped by one shared state.

Every loop the worker starts runs under `supervised`: an exception is logged and the loop is
started again after a backoff (doubling, capped), never silently ended and never allowed to
end the daemon. A periodic step (`every`) that fails is logged and tried again at its next
period. Loops return on their own once `Lifecycle.closing` is set; only stragglers are
cancelled (cancelling a Redis call mid-flight can leave its connection half-read).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dispatch.log import event

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


@dataclass
class Lifecycle:
    """Where the daemon is: serving, draining (no new claims), or closing (loops return)."""

    draining: bool = False
    closing: bool = False
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def close(self) -> None:
        self.draining = self.closing = True
        self.stopping.set()

    async def stopped_within(self, seconds: float) -> bool:
        """Wait up to `seconds`; True as soon as the daemon is closing."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()


async def supervised(name: str, loop: Callable[[], Awaitable[None]], life: Lifecycle) -> None:
    """Run `loop` until it returns; restart it with backoff whenever it raises."""
    backoff = FIRST_BACKOFF_S
    while not life.closing:
        try:
            await loop()
            return
        except Exception as exc:
            event("task_failed", task=name, error=f"{type(exc).__name__}: {exc}", retry_s=backoff)
        if await life.stopped_within(backoff):
            return
        backoff = min(backoff * 2, MAX_BACKOFF_S)


async def every(
    name: str,
    period_s: float,
    step: Callable[[], Awaitable[None]],
    life: Lifecycle,
    *,
    at_start: bool = False,
) -> None:
    """Run `step` every `period_s` (jittered 10%, so a fleet does not beat in step)."""
    if not at_start and await life.stopped_within(period_s):
        return
    while not life.closing:
        try:
            await step()
        except Exception as exc:
            event("step_failed", task=name, error=f"{type(exc).__name__}: {exc}")
        if await life.stopped_within(period_s * random.uniform(0.9, 1.1)):
            return
