"""The error replies a real Redis sends when it cannot serve a command, for the proxy's `error`
mode, and a way to make a client meet them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

# One of each kind a daemon meets in the field: failover, maxmemory, a long script, a restart,
# a replica cut from its master.
ERROR_REPLIES = {
    "READONLY": b"-READONLY You can't write against a read only replica.\r\n",
    "OOM": b"-OOM command not allowed when used memory > 'maxmemory'.\r\n",
    "BUSY": b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL.\r\n",
    "LOADING": b"-LOADING Redis is loading the dataset in memory\r\n",
    "MASTERDOWN": b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is no\r\n",
}


async def answering_errors(client: Redis) -> None:
    """Wait until `client` gets the proxy's error replies: switching modes cut its connection,
    and the first call after a cut fails for want of one, as after a real failover."""
    for _ in range(5):
        try:
            await client.ping()
        except RedisConnectionError as exc:
            if type(exc) is not RedisConnectionError:  # LOADING is filed as one: an answer
                return
        except RedisError:
            return
    raise AssertionError("the proxy never answered with an error")


@contextlib.asynccontextmanager
async def mute_redis() -> AsyncIterator[Redis]:
    """A client of a server that takes every command and answers none: a frozen Redis, on
    this test's own loop (the proxy's `blackhole`, without a real server behind it)."""
    held: list[asyncio.StreamWriter] = []

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    client = Redis.from_url(f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0")
    try:
        yield client
    finally:
        await client.aclose()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
