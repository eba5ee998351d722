"""A running job's output on its page: the run's tail in Redis, written by the real writer
(dispatch/records/tail.py), sent as events until the run's end mark."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from dispatch.client import Client
from dispatch.model import Job, encode_job
from dispatch.queue.transitions import NewJob, Queue
from dispatch.records.tail import Tails
from dispatch.web.feed import event
from dispatch.web.tails import follow

pytestmark = pytest.mark.anyio


async def test_the_output_so_far_then_the_rest_then_the_end(
    redis: Redis, prefix: str, client: Client
) -> None:
    q = Queue(redis, "jobs", prefix)
    await q.enqueue([NewJob("out", encode_job(Job(id="out", command=["x"])))])
    [claim] = (await q.claim(1, "h1", 60_000)).claims
    tail = Tails(redis, prefix, 64 * 1024, 60).open("jobs", "out", 1, claim.token)
    assert tail is not None
    tail.feed(b"first <b>line</b>\n")
    view = await client.get("out")
    assert view is not None and view.state == "active"
    stream = follow(client, view)
    assert await anext(stream) == event("output", "first <b>line</b>\n")
    tail.feed(b"second\n")
    await tail.close(3)
    assert await anext(stream) == event("output", "second\n")
    assert await anext(stream) == event("end", "attempt 1 ended, exit code 3")
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_a_job_that_ended_without_running_says_so(
    redis: Redis, prefix: str, client: Client
) -> None:
    done = await client.submit(Job(id="never", command=["x"]))
    await client.cancel(done.id, 0.1)
    view = await client.get("never")
    assert view is not None and view.state == "cancelled"
    said = [part async for part in follow(client, view)]
    assert said == [event("end", "it ended without a run")]
