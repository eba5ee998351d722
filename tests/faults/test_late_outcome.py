"""The late-outcome paths on a Redis that answers errors (READONLY, ...): the settled gate's
one-beat mark raises RedisUnavailable (the processor defers the job, nothing spent), and a
refused finish's outcome that cannot be kept is logged and dropped (the job reruns)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatch.clock import FakeClock
from dispatch.config.settings import Settings
from dispatch.daemon.capacity import Capacity
from dispatch.daemon.lane import Lane, Timing
from dispatch.daemon.tasks import Lifecycle
from dispatch.errors import RedisUnavailable
from dispatch.gates.base import Pickup
from dispatch.gates.settled import SettledGate
from dispatch.model import Job, encode_job
from dispatch.queue.transitions import Claim, Finish, NewJob, Queue
from dispatch.records.disk_log import RecordLog
from dispatch.records.mirror import RunMirror
from tests.support.redis_errors import ERROR_REPLIES, answering_errors

pytestmark = pytest.mark.anyio
JOB = Job(id="j", command=["true"])


@pytest.mark.parametrize("mode", list(ERROR_REPLIES))
async def test_the_outcome_wait_mark_on_an_erring_redis_is_a_redis_fault(
    proxied, proxy, prefix, mode
) -> None:
    stalled = Pickup(Claim("jobs", "j", "h:2", 1, 1, 0, encode_job(JOB)), JOB)
    with proxy.fault("error", ERROR_REPLIES[mode]):
        await answering_errors(proxied)
        with pytest.raises(RedisUnavailable):
            await SettledGate(RunMirror(proxied, prefix)).check(stalled)


async def test_an_outcome_that_cannot_be_kept_is_logged_and_the_lane_goes_on(
    redis, proxied, proxy, prefix, tmp_path: Path, events
) -> None:
    queue = Queue(proxied, "jobs", prefix)
    await queue.enqueue([NewJob("a", b'{"id":"a"}')])
    (a,) = (await queue.claim(1, "h1", 60_000)).claims
    await redis.hdel(queue.keys.lock, "a")  # swept meanwhile
    lane = Lane(
        queue, Settings(redis_url="", embedded=False, prefix=prefix, host="h1"),
        Timing(idle_claim_s=30.0), Capacity(0, 10), Lifecycle(), FakeClock(),
        RecordLog(tmp_path), proxied, lambda claim, sent: None,
    )  # fmt: skip
    run = b'{"id":"a","attempt":1,"outcome":"completed"}'
    refused = Finish("finish", "a", a.token, b"{}", run_id="a#1", run=run)
    with proxy.fault("error", ERROR_REPLIES["READONLY"]):
        await answering_errors(proxied)
        await lane.flights._keep_outcomes([refused], None)
    assert events("refused_outcome_not_kept") and not lane.flights.keeping
    assert await redis.hget(queue.keys.runs, "a#1") is None
