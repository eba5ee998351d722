"""arq under `bench.compare`'s protocol (bench/peers/protocol.py); run by bench/peers/.venv.

arq has no pause: the jobs are enqueued before the worker exists, and the worker starts at
"go". Its Redis pool is made beforehand, as a worker process has one before its first poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

import uvloop
from arq import Worker, create_pool, func  # type: ignore[import-not-found]
from arq.connections import RedisSettings  # type: ignore[import-not-found]

from bench.peers.protocol import Config, Tally, config, drive

TALLY = Tally()


async def noop(ctx: dict[str, Any], phase: str | None = None, due_ms: int | None = None) -> None:
    TALLY.called(phase, due_ms)


async def finished(ctx: dict[str, Any]) -> None:
    """arq's after_job_end: called once the result is recorded, so this is the finish."""
    TALLY.finished(time.time() * 1000)


async def worker(cfg: Config) -> Any:
    pool = await create_pool(RedisSettings.from_dsn(cfg.url), default_queue_name=cfg.queue)
    return Worker(
        [func(noop, name="noop")],
        queue_name=cfg.queue,
        redis_pool=pool,
        max_jobs=cfg.concurrency,
        handle_signals=False,  # it runs inside this script's loop, which owns the process
        after_job_end=finished,
        **({} if cfg.poll_s is None else {"poll_delay": cfg.poll_s}),
    )


class Arq:
    """arq's calls for `drive`."""

    def __init__(self, cfg: Config, producer: Any) -> None:
        self.cfg, self.redis = cfg, producer  # ArqRedis is a redis-py client
        self.consumer: Any = None
        self.task: asyncio.Task[Any] | None = None

    async def enqueue_noop(self, n: int) -> object:
        return await self.redis.enqueue_job("noop")

    async def enqueue_due(self, phase: str, due_ms: int) -> object:
        when = datetime.fromtimestamp(due_ms / 1000, UTC)
        return await self.redis.enqueue_job("noop", phase=phase, due_ms=due_ms, _defer_until=when)

    async def prepare(self) -> None:
        self.consumer = await worker(self.cfg)

    async def start(self) -> None:
        self.task = asyncio.create_task(self.consumer.async_run())

    async def stop(self) -> None:
        await self.consumer.close()  # cancels its main task
        with contextlib.suppress(asyncio.CancelledError):
            if self.task is not None:
                await self.task
        await self.redis.aclose()


async def run(cfg: Config) -> None:
    producer = await create_pool(RedisSettings.from_dsn(cfg.url), default_queue_name=cfg.queue)
    await drive(cfg, TALLY, Arq(cfg, producer))


if __name__ == "__main__":
    uvloop.run(run(config()))
