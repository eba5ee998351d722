"""Background tasks of the daemon: supervised, periodic, and stopped by one shared state.

Every background loop of the daemon runs one of two ways: a loop of its own under
`supervised` (an exception is logged and the loop is started again after a backoff, doubling,
capped), or a periodic step under `every` (a step that fails is logged and tried again at its
next period). None ends silently, and none can end the daemon. The worker's loops stop with its
`Lifecycle`; the assembly's (the host name's renewal, the config follower, the reconcile, the
egress refresh) with the daemon's stop signal, seen the same way through `OnStop`. Loops return
on their own once closing; only stragglers are cancelled (cancelling a Redis call mid-flight can
leave its connection half-read).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from dispatch.log import event

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


async def set_within(flag: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `flag`; whether it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(flag.wait(), seconds)
    return flag.is_set()


class Stopping(Protocol):
    """What a background loop asks of the state that stops it."""

    @property
    def closing(self) -> bool: ...

    async def stopped_within(self, seconds: float) -> bool: ...


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
        return await set_within(self.stopping, seconds)


@dataclass(frozen=True)
class OnStop:
    """A stop event seen as a lifecycle: closing once it is set."""

    stop: asyncio.Event

    @property
    def closing(self) -> bool:
        return self.stop.is_set()

    async def stopped_within(self, seconds: float) -> bool:
        return await set_within(self.stop, seconds)


async def supervised(name: str, loop: Callable[[], Awaitable[None]], life: Stopping) -> None:
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
    life: Stopping,
    *,
    at_start: bool = False,
    jitter: bool = True,
) -> None:
    """Run `step` every `period_s`, jittered 10% so a fleet does not beat in step (`jitter`:
    False for a step of this host's alone)."""
    if not at_start and await life.stopped_within(period_s):
        return
    while not life.closing:
        try:
            await step()
        except Exception as exc:
            event("step_failed", task=name, error=f"{type(exc).__name__}: {exc}")
        if await life.stopped_within(period_s * random.uniform(0.9, 1.1) if jitter else period_s):
            return
