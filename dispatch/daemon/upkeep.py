"""Upkeep: what keeps the fleet's shared state honest, on timers.

sweep      per queue, every `DISPATCH_SWEEP_EVERY`: claims whose lock deadline passed go
           back to wait (or fail `stalled` past `DISPATCH_MAX_STALLS`); whoever sweeps
           first does it, so a dead host's jobs come back within lock + one sweep period;
heartbeat  this host's alive key (with its running count), which other hosts count and
           `dispatch cancel` asks before it waits for an acknowledgement.
"""

from __future__ import annotations

from collections.abc import Callable

from redis.asyncio import Redis

from dispatch.clock import Clock
from dispatch.config.settings import Settings
from dispatch.log import event
from dispatch.model import Result, encoder, iso
from dispatch.queue import fleet_pause, keys
from dispatch.queue.transitions import Queue
from dispatch.reasons import INFRA, STALLED


class Upkeep:
    def __init__(
        self, settings: Settings, redis: Redis, clock: Clock, running: Callable[[], int]
    ) -> None:
        self.s = settings
        self.redis = redis
        self.clock = clock
        self.running = running
        self._beats = 0

    async def sweep(self, queue: Queue) -> list[str]:
        """Sweep one queue; the ids put back in wait."""
        result = Result(
            state="failed",
            outcome=INFRA,
            reason=STALLED,
            host=self.s.host,
            ended_at=iso(self.clock.now_ms()) or "",
        )
        requeued, failed = await queue.sweep(self.s.max_stalls, encoder.encode(result))
        if requeued or failed:
            event("stalled_jobs_swept", queue=queue.name, requeued=requeued, failed=failed)
        return requeued

    async def beat(self, period_s: float) -> None:
        alive = keys.host_alive(self.s.host, self.s.prefix)
        payload = encoder.encode({"host": self.s.host, "running": self.running()})
        await self.redis.set(alive, payload, px=int(period_s * 3000))
        # the pause is followed every other beat (an idle daemon stays near one command a
        # second); the first beat, before any claim, also registers the queues
        if self._beats % 2 == 0:
            await fleet_pause.follow(
                self.redis, self.s.prefix, self.s.queues, register=self._beats == 0
            )
        self._beats += 1
