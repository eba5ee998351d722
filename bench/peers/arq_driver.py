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

from bench.peers.protocol import Config, Tally, config, emit, expect, in_chunks, late_phases

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


async def run(cfg: Config) -> None:
    producer = await create_pool(RedisSettings.from_dsn(cfg.url), default_queue_name=cfg.queue)
    emit("ready")
    await expect("enqueue")
    await in_chunks(range(cfg.jobs), lambda _: producer.enqueue_job("noop"))
    emit("enqueued")
    await expect("start")
    consumer = await worker(cfg)
    emit("started")
    await expect("go")
    task = asyncio.create_task(consumer.async_run())
    await TALLY.until(cfg.jobs)
    emit("processed", done=TALLY.done, last_finish_ms=TALLY.last_finish_ms)
    await expect("late")

    async def delayed(phase: str, due: list[int]) -> None:
        def one(at: int) -> Any:
            when = datetime.fromtimestamp(at / 1000, UTC)
            return producer.enqueue_job("noop", phase=phase, due_ms=at, _defer_until=when)

        await in_chunks(due, one)

    await late_phases(cfg, producer, TALLY, delayed)
    await consumer.close()  # cancels its main task
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await producer.aclose()


if __name__ == "__main__":
    uvloop.run(run(config()))
