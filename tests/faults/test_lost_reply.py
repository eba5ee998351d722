"""A claim whose script ran but whose reply was lost: the lane hands the claim back within one
renewal period, spending no attempt and counting no stall, instead of leaving it active for a
whole lock and then counting a stall."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.clock import SystemClock
from dispatch.config.settings import Settings
from dispatch.daemon.capacity import Capacity
from dispatch.daemon.lane import Lane, Timing
from dispatch.daemon.tasks import Lifecycle
from dispatch.queue.scripts import load_all
from dispatch.queue.transitions import Claim, NewJob, Queue
from dispatch.records.disk_log import RecordLog
from tests.support.redis_proxy import RedisProxy

pytestmark = pytest.mark.anyio


@pytest.fixture
async def through(proxy: RedisProxy) -> AsyncIterator[Redis]:
    client = Redis.from_url(proxy.url, socket_timeout=0.5)
    yield client
    await client.aclose()


async def test_a_claim_whose_reply_was_lost_is_handed_back(
    redis: Redis, through: Redis, proxy: RedisProxy, prefix: str, tmp_path: Path
) -> None:
    await load_all(redis)
    direct = Queue(redis, "jobs", prefix)
    await direct.enqueue([NewJob("j1", b"{}")])
    started: list[Claim] = []
    settings = Settings(redis_url="", embedded=False, prefix=prefix, host="h1")
    lane = Lane(
        Queue(through, "jobs", prefix),
        settings,
        Timing(),
        Capacity(1, 10),
        Lifecycle(),
        SystemClock(),
        RecordLog(tmp_path),
        through,
        lambda claim, sent: started.append(claim),
    )
    await through.ping()  # connected (the handshake answered) before replies go missing
    with proxy.fault("deaf"):
        await lane.claim()
    assert started == [] and lane.unsure
    assert await redis.hget(direct.keys.lock, "j1") is not None  # the script did run
    await lane.recover(running=set())
    assert await direct.redis.lrange(direct.keys.wait, 0, -1) == [b"j1"]
    assert not await redis.exists(direct.keys.stalls, direct.keys.attempts)
    assert not lane.unsure


async def test_a_claim_this_process_runs_is_not_handed_back(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    await load_all(redis)
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", b"{}")])
    (claim,) = (await queue.claim(1, "h1", 60_000)).claims
    settings = Settings(redis_url="", embedded=False, prefix=prefix, host="h1")
    lane = Lane(
        queue, settings, Timing(), Capacity(1, 10), Lifecycle(), SystemClock(),
        RecordLog(tmp_path), redis, lambda claim, sent: None,
    )  # fmt: skip
    lane.unsure = True
    await lane.recover(running={(claim.id, claim.token)})
    assert await redis.hget(queue.keys.lock, "j1") == claim.token.encode()
