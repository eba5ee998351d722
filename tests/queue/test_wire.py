"""Commands in one round trip on a pooled connection: replies in order, an error reply in its
command's place, and a connection that failed mid-read never handed to the next caller."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

from dispatch.queue.connect import redis_client
from dispatch.queue.wire import send_all

pytestmark = pytest.mark.anyio


async def test_replies_come_in_order_with_an_error_reply_in_its_place(
    redis_url: str, prefix: str
) -> None:
    client = redis_client(redis_url, 5)
    try:
        key = f"{prefix}:k"
        replies = await send_all(
            client, [("SET", key, "v"), ("INCR", key), ("GET", key), ("EVALSHA", "0" * 40, 0)]
        )
        assert replies[0] is True or replies[0] == b"OK"
        assert isinstance(replies[1], ResponseError)  # not an integer
        assert replies[2] == b"v"
        assert isinstance(replies[3], NoScriptError)  # what the caller reloads scripts on
        assert await send_all(client, [("GET", key)]) == [b"v"]  # the connection kept in step
    finally:
        await client.aclose()


async def test_a_read_that_timed_out_leaves_no_reply_behind_for_the_next_call(
    redis_url: str, prefix: str
) -> None:
    """redis-py's read drops such a connection itself; send_all drops it on any failure,
    the send included. Either way the pool must never hand out a half-read one."""
    client = redis_client(redis_url, 0.2)
    try:
        with pytest.raises(RedisTimeout):  # its reply comes a second later, on that socket
            await send_all(client, [("BLPOP", f"{prefix}:never", 1)])
        await client.set(f"{prefix}:k", "fresh")
        for _ in range(3):  # whichever pooled connection serves it, the answer is its own
            assert await send_all(client, [("GET", f"{prefix}:k")]) == [b"fresh"]
    finally:
        await client.aclose()


async def test_the_call_is_on_the_wire_before_callbacks_queued_ahead_of_it_run(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy daemon begins a cohort of jobs (25 queued steps) just before it sends their
    peers' endings: the call must leave first, not after those steps have run."""
    client = redis_client(redis_url, 5)
    order: list[str] = []
    written = asyncio.StreamWriter.writelines

    def spy(self: asyncio.StreamWriter, data: Any) -> None:
        order.append("written")
        written(self, data)

    try:
        await send_all(client, [("GET", f"{prefix}:k")])  # the key's node's, connected
        monkeypatch.setattr(asyncio.StreamWriter, "writelines", spy)
        asyncio.get_running_loop().call_soon(order.append, "queued step")
        assert await send_all(client, [("SET", f"{prefix}:k", "v")]) in ([True], [b"OK"])
        assert order == ["written", "queued step"]
    finally:
        await client.aclose()
