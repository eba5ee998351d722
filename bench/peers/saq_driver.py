"""SAQ under `bench.compare`'s protocol (bench/peers/protocol.py); run by bench/peers/.venv.

SAQ has no pause: the jobs are enqueued before the worker exists, and the worker starts at
"go" on a queue object (its own connection pool) made beforehand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvloop
from saq import Queue, Worker  # type: ignore[import-not-found]

from bench.peers.protocol import Config, Tally, config, drive

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


class Saq:
    """SAQ's calls for `drive`."""

    def __init__(self, cfg: Config, producer: Any) -> None:
        self.cfg, self.producer, self.redis = cfg, producer, producer.redis
        self.consumer: Any = None
        self.task: asyncio.Task[Any] | None = None

    async def enqueue_noop(self, n: int) -> object:
        return await self.producer.enqueue("noop")

    async def enqueue_due(self, phase: str, due_ms: int) -> object:
        return await self.producer.enqueue(
            "noop", scheduled=due_ms / 1000, bench_phase=phase, bench_due_ms=due_ms
        )

    async def prepare(self) -> None:
        self.consumer = await worker(self.cfg)

    async def start(self) -> None:
        self.task = asyncio.create_task(self.consumer.start())

    async def stop(self) -> None:
        await self.consumer.stop()
        if self.task is not None:
            await self.task
        await self.consumer.queue.disconnect()
        await self.producer.disconnect()


async def run(cfg: Config) -> None:
    producer = Queue.from_url(cfg.url, name=cfg.queue)
    await producer.connect()
    await drive(cfg, TALLY, Saq(cfg, producer))


if __name__ == "__main__":
    uvloop.run(run(config()))
