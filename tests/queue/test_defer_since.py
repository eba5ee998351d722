"""A job deferred again for the same reason keeps the instant it first waited (`since`)."""

from __future__ import annotations

import msgspec
import pytest

from dispatch.model import DeferRecord
from dispatch.queue.transitions import Finish, NewJob, Queue

pytestmark = pytest.mark.anyio


async def defer_once(queue: Queue, reason: str, at: str) -> DeferRecord:
    await queue.redis.zadd(queue.keys.delayed, {"a": 0})  # due at once, whatever was set
    batch = await queue.claim(1, "h", 60_000)
    claim = batch.claims[0]
    payload = msgspec.json.encode(DeferRecord(reason=reason, until=at, at=at))
    assert await queue.finish([Finish("defer", claim.id, claim.token, payload, 60_000)]) == [True]
    raw = await queue.redis.hget(queue.keys.defer, "a")
    assert raw is not None
    return msgspec.json.decode(raw, type=DeferRecord)


async def test_same_reason_keeps_since_and_a_new_reason_starts_again(redis, prefix) -> None:
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("a", b"{}")])
    first = await defer_once(queue, "scope-repo", "t1")
    assert first.since == ""
    again = await defer_once(queue, "scope-repo", "t2")
    assert (again.since, again.at) == ("t1", "t2")
    third = await defer_once(queue, "scope-repo", "t3")
    assert (third.since, third.at) == ("t1", "t3")
    other = await defer_once(queue, "pause-window", "t4")
    assert (other.since, other.reason) == ("", "pause-window")


async def test_unreadable_previous_record_is_replaced(redis, prefix) -> None:
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("a", b"{}")])
    await redis.hset(queue.keys.defer, "a", b"not json")
    record = await defer_once(queue, "scope-repo", "t1")
    assert (record.reason, record.since) == ("scope-repo", "")
