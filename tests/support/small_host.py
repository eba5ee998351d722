"""A small host on a real Redis for the tests of claiming ahead: a worker of few slots whose
runs are held open with an event (never a sleep) and that claims ahead from its start, with
helpers to enqueue jobs and read what they counted. tests/daemon/test_ahead.py and the fault
test of waiting claims (tests/faults/test_ahead_faults.py) share it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from dispatch.clock import Clock
from dispatch.daemon.capacity import AHEAD_AFTER
from dispatch.daemon.metrics import Metrics
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.daemon.worker import Worker
from dispatch.model import Job, encode_job
from dispatch.queue.connect import redis_client
from dispatch.queue.transitions import NewJob, Queue
from dispatch.runners.base import IsLive, RunContext, RunResult
from tests.support.polling import eventually
from tests.support.workers import FAST, make_settings


class HeldRuns:
    """Each run waits for `release` (or its abort); counts the runs under way at once, and
    notes the task each ran in and what else was under way as it began."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.now = 0
        self.most = 0
        self.ran: list[str] = []
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.began_beside: list[int] = []  # runs under way as each began

    async def run(self, ctx: RunContext) -> RunResult:
        self.began_beside.append(self.now)
        self.now += 1
        self.most = max(self.most, self.now)
        self.ran.append(ctx.job.id)
        self.tasks.append(asyncio.current_task())
        aborted = asyncio.ensure_future(ctx.aborted.wait())
        released = asyncio.ensure_future(self.release.wait())
        try:
            await asyncio.wait({aborted, released}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
            released.cancel()
            self.now -= 1
        stopped = not self.release.is_set()
        return RunResult(started=True, exit_code=0, stopped=stopped, started_ms=1, ended_ms=2)

    async def reap(self, host: str, is_live: IsLive) -> bool:
        return True

    async def settle(self) -> None:
        pass

    def running_as(self, job_id: str) -> str:
        return ""

    async def kill_again(self, job_id: str) -> None:
        pass


@dataclass
class Host:
    worker: Worker
    runner: HeldRuns
    queue: Queue
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def waiting(self, n: int) -> None:
        """Until `n` claims wait for a slot."""
        await eventually(lambda: truthy(len(self.worker.ahead) == n))

    async def in_wait(self) -> list[str]:
        return [text(i) for i in await self.queue.redis.lrange(self.queue.keys.wait, 0, -1)]


async def truthy(value: object) -> bool:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        value = await value
    return bool(value)


async def equals(value: object, expected: object) -> bool:
    return await value == expected  # type: ignore[misc]


@contextlib.asynccontextmanager
async def small_host(
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    slots: int,
    clock: Clock | None = None,
    metrics: Metrics | None = None,
) -> AsyncIterator[Host]:
    settings = make_settings(redis_url, prefix, tmp_path, concurrency=slots)
    redis = redis_client(settings.redis_url, socket_timeout=30)
    runner = HeldRuns()
    output = settings.state_dir / "output"
    processor = Processor(ProcessorSettings(host=settings.host, output_dir=output), runner)
    worker = Worker(settings, redis, processor, timing=FAST, clock=clock, metrics=metrics)
    for _ in range(AHEAD_AFTER):  # a host whose runs have been fast
        worker.capacity.ran(0.0)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield Host(worker, runner, Queue(redis, "jobs", prefix), stop, task)
    finally:
        runner.release.set()
        stop.set()
        await asyncio.wait_for(task, 30)
        await redis.aclose()


async def enqueue(queue: Queue, n: int) -> list[str]:
    ids = [f"j{i}" for i in range(n)]
    await queue.enqueue([NewJob(i, encode_job(Job(id=i, command=["x"]))) for i in ids])
    return ids


async def states(redis: Redis, queue: Queue, ids: list[str]) -> dict[str, int]:
    """How many attempts and stalls each job has counted."""
    attempts = await redis.hmget(queue.keys.attempts, ids)
    stalls = await redis.hmget(queue.keys.stalls, ids)
    return {
        "attempts": sum(int(a or 0) for a in attempts),
        "stalls": sum(int(s or 0) for s in stalls),
    }


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
