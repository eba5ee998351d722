"""Several commands in one round trip on one pooled connection: the busy daemon's finish-and-claim.

redis-py's `Pipeline` spends about 6 us per job of a 25-job finish-and-claim on its own
machinery (command stacks with options, a retry wrapper, response callbacks, a reset); here the
commands are packed, sent and their replies read on a connection from the client's own pool,
which then goes back to it.

The call is written to the socket in the caller's step. redis-py's own send bounds the write
with `wait_for`, which on Python 3.11 runs it as a task of its own, after every callback already
queued: on a busy daemon, after the 25 jobs of a cohort that began just before, so the call
left about a cohort's run (1.4 ms) late and both cohorts' calls were in the air at once.

Errors. An error reply (NOSCRIPT, READONLY, a script's error) is read whole and returned in
its command's place, as the exception redis-py makes of it: the connection stays in step and
the caller decides. Anything else on the way (a timeout, a lost connection, a cancellation)
disconnects the connection before it goes back, so no half-read reply waits for its next
user, and is raised. Nothing is sent again here: a claim whose reply was lost may have run,
which only the caller can tell (it hands such claims back: daemon/lane.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

Command = tuple[Any, ...]


async def send_all(redis: Redis, commands: Sequence[Command]) -> list[Any]:
    """Each command's reply, in order; an error reply as its ResponseError."""
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    replies: list[Any] = []
    try:
        await _write(conn, conn.pack_commands(commands))
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # read whole: the next reply is next on the wire
                replies.append(exc)
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    return replies


async def _write(conn: AbstractConnection, packed: list[bytes]) -> None:
    """Written now, bounded by the socket timeout (only a full send buffer makes it wait). No
    health check: a connection that died while idle fails this call, which the caller retries
    as any Redis fault; the check's clock read costs a syscall per call."""
    if not conn.is_connected:
        await conn.connect()  # type: ignore[no-untyped-call]
    async with asyncio.timeout(conn.socket_timeout):
        await conn._send_packed_command(packed)
