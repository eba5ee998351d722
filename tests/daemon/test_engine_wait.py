"""A run the engine never answered is held `engine-unavailable`, spending no attempt, until the
job has waited DISPATCH_ENGINE_WAIT_MAX since it first waited; then it takes the infra retry.

Pickups go through the real queue scripts, so `since` is kept the way the finishing script
keeps it; the clock is a FakeClock, and a deferred job is made due by hand.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from redis.asyncio import Redis

from dispatch.clock import FakeClock
from dispatch.daemon.engine_wait import EngineWait, since_ms
from dispatch.daemon.processor import Ending, Processor, ProcessorSettings
from dispatch.model import DeferRecord, Job, Result, encode_job, iso
from dispatch.queue.transitions import Finish, NewJob, Queue
from dispatch.reasons import (
    CANCELLED,
    DOCKER_UNAVAILABLE,
    ENGINE_UNAVAILABLE,
    OPERATOR_CANCEL,
    RETRY,
    SHUTDOWN,
)
from dispatch.runners.base import AbortSignal, IsLive, RunContext, Runner, RunResult
from tests.support.pickups import claim_of
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio

MAX_WAIT_MS = 10 * 60_000


class Unreachable(Runner):
    """A runner whose engine never answers: nothing starts."""

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, ctx: RunContext) -> RunResult:
        self.runs += 1
        return RunResult(started=False, error=DOCKER_UNAVAILABLE)

    async def reap(self, host: str, is_live: IsLive) -> bool:
        return True

    async def settle(self) -> None:
        pass


def processor(redis: Redis, prefix: str, clock: FakeClock, tmp_path: Path) -> Processor:
    wait = EngineWait(redis, prefix, MAX_WAIT_MS, clock)
    settings = ProcessorSettings("h", tmp_path)
    return Processor(settings, Unreachable(), clock=clock, engine_wait=wait)


async def pickup(queue: Queue, proc: Processor) -> tuple[Ending, int]:
    """Claim the job (due at once), process it, end the claim; the ending and the attempt."""
    await queue.redis.zadd(queue.keys.delayed, {"j": 0})
    (claim,) = (await queue.claim(1, "h", 60_000)).claims
    ending = await proc.process(claim, AbortSignal())
    done = Finish(ending.action, claim.id, claim.token, ending.payload, ending.delay_ms)
    assert await queue.finish([done]) == [True]
    return ending, claim.attempt


def deferral(ending: Ending) -> DeferRecord:
    return msgspec.json.decode(ending.payload, type=DeferRecord)


async def test_the_job_waits_for_the_engine_then_takes_the_infra_retry(
    redis, prefix, tmp_path: Path
) -> None:
    clock = FakeClock()
    first_ms = clock.now_ms()
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j", encode_job(Job(id="j", command=["true"])))])
    proc = processor(redis, prefix, clock, tmp_path)

    ending, attempt = await pickup(queue, proc)
    assert (ending.action, deferral(ending).reason, ending.delay_ms) == (
        "defer",
        ENGINE_UNAVAILABLE,
        2_000,
    )
    assert ending.record is None and attempt == 1  # nothing ran: no record, no attempt

    clock.advance(30)
    ending, attempt = await pickup(queue, proc)
    assert (ending.action, ending.delay_ms, attempt) == ("defer", 15_000, 1)  # backs off
    assert since_ms(await redis.hget(queue.keys.defer, "j")) == first_ms  # kept by the script

    clock.advance(MAX_WAIT_MS / 1000 - 31)
    ending, attempt = await pickup(queue, proc)
    assert (ending.action, ending.delay_ms, attempt) == ("defer", 1_000, 1)  # not past the bound

    clock.advance(1)
    ending, attempt = await pickup(queue, proc)
    assert (ending.action, deferral(ending).reason, deferral(ending).detail) == (
        "retry",
        RETRY,
        DOCKER_UNAVAILABLE,
    )
    assert ending.record is not None and ending.record.reason == DOCKER_UNAVAILABLE
    ending, attempt = await pickup(queue, proc)  # the next attempt waits afresh
    assert (attempt, deferral(ending).reason, ending.delay_ms) == (2, ENGINE_UNAVAILABLE, 2_000)


async def test_the_backoff_is_capped(redis, prefix) -> None:
    clock = FakeClock()
    wait = EngineWait(redis, prefix, 24 * 3_600_000, clock)
    job = Job(id="j", command=["true"])
    record = DeferRecord(reason=ENGINE_UNAVAILABLE, until="", at=iso(clock.now_ms()) or "")
    await redis.hset(Queue(redis, "jobs", prefix).keys.defer, "j", msgspec.json.encode(record))
    clock.advance(3600)
    held = await wait.hold(claim_of(job))
    assert held is not None and held.delay_ms == 60_000


async def test_a_wait_for_another_reason_does_not_count(redis, prefix) -> None:
    clock = FakeClock()
    wait = EngineWait(redis, prefix, MAX_WAIT_MS, clock)
    job = Job(id="j", command=["true"])
    old = iso(clock.now_ms() - 2 * MAX_WAIT_MS) or ""
    record = DeferRecord(reason="scope-repo", until=old, at=old, since=old)
    await redis.hset(Queue(redis, "jobs", prefix).keys.defer, "j", msgspec.json.encode(record))
    held = await wait.hold(claim_of(job))
    assert held is not None and (held.reason, held.delay_ms) == (ENGINE_UNAVAILABLE, 2_000)


async def test_redis_unreadable_holds_the_job_as_a_first_wait(prefix) -> None:
    down = Redis(port=free_port(), socket_connect_timeout=1)  # nothing listens there
    try:
        wait = EngineWait(down, prefix, MAX_WAIT_MS, FakeClock())
        held = await wait.hold(claim_of(Job(id="j", command=["true"])))
    finally:
        await down.aclose()
    assert held is not None and held.reason == ENGINE_UNAVAILABLE


async def test_an_aborted_pickup_ends_as_its_abort_says(redis, prefix, tmp_path: Path) -> None:
    proc = processor(redis, prefix, FakeClock(), tmp_path)
    job = Job(id="j", command=["true"])
    signal = AbortSignal()
    signal.abort(SHUTDOWN)
    ending = await proc.process(claim_of(job), signal)
    assert (ending.action, deferral(ending).reason) == ("defer", SHUTDOWN)
    signal = AbortSignal()
    signal.abort(OPERATOR_CANCEL)
    ending = await proc.process(claim_of(job), signal)
    result = msgspec.json.decode(ending.payload, type=Result)
    assert (ending.action, result.outcome) == ("finish", CANCELLED)


async def test_without_an_engine_wait_the_run_is_retried_as_before(tmp_path: Path) -> None:
    proc = Processor(ProcessorSettings("h", tmp_path), Unreachable())
    ending = await proc.process(claim_of(Job(id="j", command=["true"])), AbortSignal())
    assert (ending.action, deferral(ending).detail) == ("retry", DOCKER_UNAVAILABLE)
