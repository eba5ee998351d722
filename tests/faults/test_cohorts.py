"""A host of many slots runs its jobs in two cohorts, with two finish-and-claim calls in flight
(daemon/lane.py). Those calls meet Redis answering READONLY, then refusing connections, while
the jobs drain: every job still completes, once, with no attempt spent, and the daemon lives.
Real redis-server behind `RedisProxy`, a real daemon process, real commands."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from dispatch.model import Job, encode_job
from dispatch.queue.transitions import NewJob, Queue
from tests.support.daemons import cli_env, daemon, log_path
from tests.support.polling import eventually
from tests.support.redis_errors import ERROR_REPLIES

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOBS = 300
SLOTS = "40"  # from 32 up: claims of 20, two cohorts


def completions(state: Path) -> Counter[str]:
    log = state / "runs.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return Counter(r["id"] for r in map(json.loads, lines) if r.get("outcome") == "completed")


async def test_two_cohorts_ride_out_readonly_and_refusals_with_every_job_run_once(
    redis: Redis, redis_url: str, prefix: str, tmp_path: Path, proxy
) -> None:
    state = tmp_path / "state"
    env = cli_env(proxy.url, prefix, state, DISPATCH_HOST="cohorts", DISPATCH_CONCURRENCY=SLOTS)
    queue = Queue(redis, "jobs", prefix)
    ids = [f"c{i:04d}" for i in range(JOBS)]
    await queue.enqueue([NewJob(i, encode_job(Job(id=i, command=["true"]))) for i in ids])
    with daemon(env) as proc:
        await eventually(lambda: _done_at_least(redis, queue, 20), timeout=30)
        for mode, error in (("error", ERROR_REPLIES["READONLY"]), ("refuse", b"")):
            with proxy.fault(mode, error):
                await anyio.sleep(1.5)  # the fault's length is the point, not a wait for a state
            assert proc.poll() is None
        await eventually(lambda: _done_at_least(redis, queue, JOBS), timeout=90)
        assert proc.poll() is None
    ran = completions(state)
    assert sorted(ran) == ids and set(ran.values()) == {1}  # each ran, and ran once
    attempts = await redis.hmget(queue.keys.attempts, ids)
    assert all(a is None or int(a) == 0 for a in attempts)  # no fault spent an attempt
    logged = [json.loads(line) for line in log_path(env).read_text().splitlines()]
    met = {e.get("during") for e in logged if e.get("event") == "redis_error"}
    assert "finish" in met  # the faults did meet the cohorts' finish-and-claim calls
    assert not [e for e in logged if e.get("event") in ("task_failed", "job_crashed")]


async def _done_at_least(redis: Redis, queue: Queue, n: int) -> bool:
    return await redis.zcard(queue.keys.done) >= n
