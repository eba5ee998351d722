"""`Queue` raises its Redis faults translated, so the daemon catches one type for them: a
`RedisUnavailable` (a `QueueFault`) with redis-py's error as its cause, still a `RedisError`
for callers outside the daemon; a script's own answers are not faults (a lost script is
loaded again inside the call: tests/faults/test_redis_errors.py)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from dispatch.errors import LockLost, RedisUnavailable, RedisUnreachable
from dispatch.queue.connect import redis_client
from dispatch.queue.faults import QueueFault, cause
from dispatch.queue.transitions import Finish, NewJob, Queue

pytestmark = pytest.mark.anyio


async def test_an_error_reply_is_a_queue_fault_with_its_cause(redis: Redis, prefix: str) -> None:
    queue = Queue(redis, "jobs", prefix)
    await redis.set(queue.keys.lock, "not a hash")  # WRONGTYPE: an error reply, Redis is there
    with pytest.raises(RedisUnavailable) as raised:
        await queue.claims()
    fault = raised.value
    assert isinstance(fault, QueueFault) and not isinstance(fault, RedisUnreachable)
    assert isinstance(fault.__cause__, ResponseError) and cause(fault) == "ResponseError"
    assert isinstance(fault, RedisError)  # what callers outside the daemon still catch
    assert str(fault).startswith("claims: ResponseError: WRONGTYPE")


async def test_the_wire_path_raises_a_scripts_error_reply_translated(
    redis_url: str, prefix: str
) -> None:
    client = redis_client(redis_url, 5)
    try:
        queue = Queue(client, "jobs", prefix)
        await queue.enqueue([NewJob("a", b"{}")])
        (claim,) = (await queue.claim(1, "h1", 60_000)).claims
        await client.delete(queue.keys.done)
        await client.set(queue.keys.done, "not a sorted set")
        finish = Finish("finish", "a", claim.token, b"{}")
        with pytest.raises(QueueFault) as raised:
            await queue.finish_and_claim([finish], 1, "h1", 60_000)
        assert isinstance(raised.value.__cause__, ResponseError)
        assert await client.ping()  # the pooled connection stayed in step
    finally:
        await client.aclose()


async def test_no_connection_is_unreachable() -> None:
    client = redis_client("redis://127.0.0.1:1", 1)
    try:
        with pytest.raises(RedisUnreachable) as raised:
            await Queue(client, "jobs", "p").claim(1, "h1", 60_000)
        assert isinstance(raised.value, QueueFault)
        assert isinstance(raised.value.__cause__, RedisConnectionError)
    finally:
        await client.aclose()


async def test_a_scripts_own_answer_is_not_a_fault(redis: Redis, prefix: str) -> None:
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob("a", b"{}")])
    await queue.claim(1, "h1", 60_000)
    with pytest.raises(LockLost) as raised:
        await queue.request_cancel("a", "h1:999", 60_000)
    assert not isinstance(raised.value, RedisUnavailable | RedisError)
