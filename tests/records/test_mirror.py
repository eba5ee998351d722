"""The fleet mirror on a real Redis: which run's record is stored, and when it is refused."""

from __future__ import annotations

import pytest

from dispatch.model import RunRecord
from dispatch.queue.keys import queue_keys
from dispatch.records.mirror import RunMirror
from tests.support.mirror import hold

pytestmark = pytest.mark.anyio


def record(claim: str, exit_code: int = 0) -> RunRecord:
    return RunRecord(
        id="j", attempt=1, host="h1", queue="jobs", outcome="completed", exit_code=exit_code,
        started_at="2026-01-01T00:00:00.000Z", claim=claim,
    )  # fmt: skip


@pytest.fixture
def mirror(redis, prefix) -> RunMirror:
    return RunMirror(redis, prefix)


async def test_the_claim_holding_the_lock_stores_its_record(mirror, redis, prefix) -> None:
    await hold(redis, prefix, "jobs", "j", "h1:1")
    seconds, micros = await redis.time()
    assert await mirror.put("jobs", record("h1:1"))
    assert await mirror.get("jobs", "j#1") == record("h1:1")
    score = await redis.zscore(queue_keys("jobs", prefix).runs_idx, "j#1")
    assert 0 <= score - (seconds * 1000 + micros // 1000) < 60_000  # the server's clock


async def test_a_run_whose_job_another_claim_holds_reports_nothing(mirror, redis, prefix) -> None:
    await hold(redis, prefix, "jobs", "j", "h2:2")
    assert not await mirror.put("jobs", record("h1:1"))
    assert await mirror.get("jobs", "j#1") is None


async def test_a_swept_claims_record_is_stored_while_nobody_else_ran_the_job(
    mirror, redis, prefix
) -> None:
    """Cut off from Redis past its lock, its run reached its exit: the next pickup should
    settle on that, not run the job again."""
    assert await mirror.put("jobs", record("h1:1"))
    assert await mirror.get("jobs", "j#1") == record("h1:1")


async def test_a_late_record_never_overwrites_the_run_that_replaced_it(
    mirror, redis, prefix
) -> None:
    await hold(redis, prefix, "jobs", "j", "h2:2")
    assert await mirror.put("jobs", record("h2:2", exit_code=0))
    await redis.hdel(queue_keys("jobs", prefix).lock, "j")  # h2's claim ended
    assert not await mirror.put("jobs", record("h1:1", exit_code=3))
    assert await mirror.get("jobs", "j#1") == record("h2:2")


async def test_a_record_naming_no_claim_is_not_stored(mirror) -> None:
    assert not await mirror.put("jobs", record(""))
    assert await mirror.get("jobs", "j#1") is None


def stopped(claim: str) -> RunRecord:
    return RunRecord(
        id="j", attempt=1, host="h1", queue="jobs", outcome="infra", reason="shutdown",
        exit_code=143, started_at="2026-01-01T00:00:00.000Z", claim=claim,
    )  # fmt: skip


async def test_a_later_runs_late_record_replaces_an_earlier_stopped_run(
    mirror, redis, prefix
) -> None:
    """Attempt 1 was stopped (`shutdown`) and handed back, spending no attempt; its run again
    reached its exit, but the finish came after a sweep: that outcome is what the next pickup
    must settle on (it failed here before: "the attempt already has a record")."""
    await hold(redis, prefix, "jobs", "j", "h1:1")
    assert await mirror.put("jobs", stopped("h1:1"))
    await redis.hdel(queue_keys("jobs", prefix).lock, "j")  # handed back, then swept
    assert await mirror.put("jobs", record("h2:2"))
    assert await mirror.get("jobs", "j#1") == record("h2:2")
    assert not await mirror.put("jobs", stopped("h1:1"))  # never the other way round
    assert await mirror.get("jobs", "j#1") == record("h2:2")


async def test_a_record_that_names_no_claim_is_replaced_by_one_that_does(
    mirror, redis, prefix
) -> None:
    await redis.hset(queue_keys("jobs", prefix).runs, "j#1", b'{"id":"j","attempt":1}')
    assert await mirror.put("jobs", record("h2:2"))
    assert await mirror.get("jobs", "j#1") == record("h2:2")
