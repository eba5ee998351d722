"""`Client.cancel`: a job not yet started is recorded cancelled at the client's clock; for a
running one it waits the whole `wait_s` for the owner's acknowledgement, even past redis-py's
default 5 s socket timeout (which once cut a loaded host's late acknowledgement short)."""

from __future__ import annotations

import anyio
import pytest

from dispatch.client import Client
from dispatch.clock import FakeClock
from dispatch.model import Job, encode_job, iso
from dispatch.queue import keys
from dispatch.queue.transitions import NewJob, Queue

pytestmark = pytest.mark.anyio


async def test_a_job_cancelled_before_start_ends_at_the_clients_clock(redis, prefix) -> None:
    clock = FakeClock(start_ms=1_700_000_123_000)
    await Queue(redis, "jobs", prefix).enqueue(
        [NewJob("j1", encode_job(Job(id="j1", command=["true"])))]
    )
    client = Client(redis, prefix, "cli", clock=clock)
    assert (await client.cancel("j1")).outcome == "cancelled"
    (record,) = await client.runs()
    assert (record.reason, record.ended_at) == ("operator-cancel", iso(1_700_000_123_000))


@pytest.mark.slow
async def test_a_late_acknowledgement_is_still_taken(redis, prefix) -> None:
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("j1", encode_job(Job(id="j1", command=["true"])))])
    (claim,) = (await queue.claim(1, "slow-host", 60_000)).claims
    await redis.set(keys.host_alive("slow-host", prefix), 1, px=60_000)

    async def acknowledge_late() -> None:
        await anyio.sleep(6)  # the scenario: a host that answers after 6 s
        await redis.lpush(queue.keys.ack(claim.id), "slow-host")

    async with anyio.create_task_group() as tg:
        tg.start_soon(acknowledge_late)
        answer = await Client(redis, prefix).cancel("j1", wait_s=9)
    assert (answer.outcome, answer.host) == ("taken", "slow-host")
