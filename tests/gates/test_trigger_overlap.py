"""Trigger-overlap gate: an occurrence whose predecessor still waits or runs is skipped."""

from __future__ import annotations

import time

import pytest

from dispatch.clock import FakeClock
from dispatch.config.schemas import ConfigSnapshot
from dispatch.gates.base import ADMIT, Refuse
from dispatch.gates.trigger_overlap import TriggerOverlapGate
from dispatch.model import Job, decode_job
from dispatch.queue import keys
from dispatch.reasons import TRIGGER_OVERLAP
from dispatch.triggers.control import run_now
from dispatch.triggers.spec import compile_trigger
from dispatch.triggers.store import TriggerStore
from tests.support.pickups import pickup_of
from tests.support.triggers import Config, job_ids, minter, trigger

pytestmark = pytest.mark.anyio


async def minted(redis, prefix: str, overlap: str) -> tuple[list[Job], ConfigSnapshot]:
    """Two occurrences of an every-minute trigger, minted ahead (both still delayed)."""
    clock = FakeClock((int(time.time()) // 60 + 24 * 60) * 60_000 + 5_000)
    config = Config(trigger("t", "* * * * *", overlap=overlap))
    await minter(redis, prefix, clock, config, every_s=60).tick()
    data = keys.queue_keys("jobs", prefix).data
    jobs = [decode_job(await redis.hget(data, i)) for i in sorted(await job_ids(redis, prefix))]
    return jobs[:2], config.snapshot


async def test_an_occurrence_is_skipped_while_its_predecessor_waits(redis, prefix) -> None:
    (first, second), snapshot = await minted(redis, prefix, "skip")
    gate = TriggerOverlapGate(redis, prefix)
    assert await gate.check(pickup_of(first, config=snapshot)) == ADMIT
    decision = await gate.check(pickup_of(second, config=snapshot))
    assert isinstance(decision, Refuse) and decision.reason == TRIGGER_OVERLAP
    assert first.id in decision.sentence
    state = await redis.hget(keys.trigger_state("t", prefix), "skipped")
    assert state == b"1"


async def test_it_runs_once_the_predecessor_finished(redis, prefix) -> None:
    (first, second), snapshot = await minted(redis, prefix, "skip")
    await redis.zadd(keys.queue_keys("jobs", prefix).done, {first.id: 1})
    assert (
        await TriggerOverlapGate(redis, prefix).check(pickup_of(second, config=snapshot)) == ADMIT
    )


async def test_overlap_allow_and_other_jobs_are_admitted(redis, prefix) -> None:
    (_, second), snapshot = await minted(redis, prefix, "allow")
    gate = TriggerOverlapGate(redis, prefix)
    assert await gate.check(pickup_of(second, config=snapshot)) == ADMIT
    plain = Job(id="plain", command=["true"], dedup="mine")
    assert await gate.check(pickup_of(plain, config=snapshot)) == ADMIT


async def test_a_manual_run_counts_as_the_previous_job(redis, prefix) -> None:
    (first, _), snapshot = await minted(redis, prefix, "skip")
    c = compile_trigger(snapshot.triggers[0])
    await run_now(TriggerStore(redis, prefix), c, int(time.time() * 1000))
    # the manual run was minted at the server's now: before both occurrences of tomorrow
    decision = await TriggerOverlapGate(redis, prefix).check(pickup_of(first, config=snapshot))
    assert isinstance(decision, Refuse)


async def test_an_occurrence_is_skipped_while_any_earlier_one_runs_not_only_the_last(
    redis, prefix
) -> None:
    clock = FakeClock((int(time.time()) // 60 + 24 * 60) * 60_000 + 5_000)
    config = Config(trigger("t", "* * * * *", overlap="skip"))
    await minter(redis, prefix, clock, config, every_s=180).tick()
    data = keys.queue_keys("jobs", prefix).data
    ids = sorted(await job_ids(redis, prefix))
    first, second, third = [decode_job(await redis.hget(data, i)) for i in ids[:3]]
    gate = TriggerOverlapGate(redis, prefix)
    assert await gate.check(pickup_of(first, config=config.snapshot)) == ADMIT  # runs long
    assert isinstance(await gate.check(pickup_of(second, config=config.snapshot)), Refuse)
    await redis.zadd(keys.queue_keys("jobs", prefix).done, {second.id: 1})  # skipped: it ended
    decision = await gate.check(pickup_of(third, config=config.snapshot))
    assert isinstance(decision, Refuse) and first.id in decision.sentence
