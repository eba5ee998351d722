"""SAQ under `bench.compare`'s protocol (bench/peers/protocol.py); run by bench/peers/.venv.

SAQ has no pause: the jobs are enqueued before the worker exists, and the worker starts at
"go" on a queue object (its own connection pool) made beforehand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvloop
from saq import Queue, Worker  # type: ignore[import-not-found]

from bench.peers.protocol import Config, Tally, config, emit, expect, in_chunks, late_phases

TALLY = Tally()


async def noop(
    ctx: dict[str, Any], bench_phase: str | None = None, bench_due_ms: int | None = None
) -> None:
    TALLY.called(bench_phase, bench_due_ms)


async def finished(ctx: dict[str, Any]) -> None:
    """SAQ's after_process: runs once the job is finished; `completed` is SAQ's own record."""
    TALLY.finished(ctx["job"].completed)


async def worker(cfg: Config) -> Any:
    queue = Queue.from_url(cfg.url, name=cfg.queue)
    await queue.connect()
    return Worker(queue, [("noop", noop)], concurrency=cfg.concurrency, after_process=[finished])


async def run(cfg: Config) -> None:
    producer = Queue.from_url(cfg.url, name=cfg.queue)
    await producer.connect()
    emit("ready")
    await expect("enqueue")
    await in_chunks(range(cfg.jobs), lambda _: producer.enqueue("noop"))
    emit("enqueued")
    await expect("start")
    consumer = await worker(cfg)
    emit("started")
    await expect("go")
    task = asyncio.create_task(consumer.start())
    await TALLY.until(cfg.jobs)
    emit("processed", done=TALLY.done, last_finish_ms=TALLY.last_finish_ms)
    await expect("late")

    async def delayed(phase: str, due: list[int]) -> None:
        def one(at: int) -> Any:
            return producer.enqueue("noop", scheduled=at / 1000, bench_phase=phase, bench_due_ms=at)

        await in_chunks(due, one)

    await late_phases(cfg, producer.redis, TALLY, delayed)
    await consumer.stop()
    await task
    await consumer.queue.disconnect()
    await producer.disconnect()


if __name__ == "__main__":
    uvloop.run(run(config()))
