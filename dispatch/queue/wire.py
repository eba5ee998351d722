"""Several commands in one round trip on one pooled connection: the busy daemon's finish-and-claim.

redis-py's `Pipeline` spends about 6 us per job of a 25-job finish-and-claim on its own
machinery (command stacks with options, a retry wrapper, response callbacks, a reset); here the
commands are packed, sent and their replies read on a connection from the client's own pool,
which then goes back to it.

Errors. An error reply (NOSCRIPT, READONLY, a script's error) is read whole and returned in
its command's place, as the exception redis-py makes of it: the connection stays in step and
the caller decides. Anything else on the way (a timeout, a lost connection, a cancellation)
disconnects the connection before it goes back, so no half-read reply waits for its next
user, and is raised. Nothing is sent again here: a claim whose reply was lost may have run,
which only the caller can tell (it hands such claims back: daemon/lane.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

Command = tuple[Any, ...]


async def send_all(redis: Redis, commands: Sequence[Command]) -> list[Any]:
    """Each command's reply, in order; an error reply as its ResponseError."""
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    replies: list[Any] = []
    try:
        # No health check: a connection that died while idle fails this call, which the
        # caller retries as any Redis fault; the check's clock read costs a syscall per call.
        await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
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
