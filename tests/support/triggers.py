"""Triggers and minters for the trigger tests: real Redis, the injected clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from redis.asyncio import Redis

from dispatch.clock import FakeClock, ServerTime
from dispatch.config.schemas import ConfigSnapshot, Trigger
from dispatch.config.settings import Settings
from dispatch.queue import keys
from dispatch.triggers.minter import Minter

JOB: dict[str, object] = {"command": ["true"]}


def trigger(tid: str, cron: str, **fields: Any) -> Trigger:
    return Trigger(id=tid, cron=cron, job=fields.pop("job", JOB), **fields)


def ms(text: str, tz: str = "UTC") -> int:
    """Epoch ms of a wall time in a zone ('2025-03-30T02:30')."""
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp() * 1000)


class Config:
    """A config snapshot a test swaps; the minter reads it through `current`."""

    def __init__(self, *triggers: Trigger) -> None:
        self.snapshot = ConfigSnapshot(triggers=triggers)

    def set(self, *triggers: Trigger) -> None:
        self.snapshot = ConfigSnapshot(triggers=triggers)

    def current(self) -> ConfigSnapshot:
        return self.snapshot


def minter(
    redis: Redis,
    prefix: str,
    clock: FakeClock,
    config: Config,
    host: str = "h1",
    every_s=60.0,
    by_server: bool = False,
) -> Minter:
    """A minter on `clock`; `by_server` sets it right by its offset to the server's TIME, as a
    daemon's is (otherwise the test moves time by hand)."""
    settings = Settings(redis_url="", embedded=False, prefix=prefix, host=host)
    settings = replace(settings, trigger_every_s=every_s)
    server_time = ServerTime(clock) if by_server else None
    return Minter(settings, redis, clock, config.current, server_time)


async def job_ids(redis: Redis, prefix: str, queue: str = "jobs") -> set[str]:
    found = await redis.hkeys(keys.queue_keys(queue, prefix).data)
    return {x.decode() if isinstance(x, bytes) else x for x in found}


async def beat(redis: Redis, prefix: str, m: Minter) -> None:
    """The heartbeat a daemon publishes, fingerprint included."""
    await redis.sadd(keys.hosts_registry(prefix), m.s.host)
    payload = f'{{"host":"{m.s.host}","running":0,"triggers":"{m.fingerprint()}"}}'
    await redis.set(keys.host_alive(m.s.host, prefix), payload, px=60_000)
