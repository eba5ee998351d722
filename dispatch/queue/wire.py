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

On a Redis Cluster the commands go, on one of its pooled connections, to the primary that owns
their keys' slot (the callers send one queue's scripts, one hash tag). A MOVED or ASK reply
says the command did not run there: it is sent again, that command alone, where the reply
points (after ASKING, for ASK), with the slot map patched as redis-py patches it, up to a few
times. Every other reply, TRYAGAIN and CLUSTERDOWN among them, is returned as above. A node
that cannot be reached (a primary gone before its replica is promoted) fails the call as
above, and the next call reads the slot map again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import AskError, MovedError, RedisClusterException, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from dispatch.queue.cluster import ClusterFault

Command = tuple[Any, ...]
REDIRECTS = 5  # a slot moving twice while one call is in the air is already rare


async def send_all(redis: Redis | RedisCluster, commands: Sequence[Command]) -> list[Any]:
    """Each command's reply, in order; an error reply as its ResponseError."""
    if isinstance(redis, RedisCluster):
        try:
            return await _send_to_owner(redis, commands)
        except RedisClusterException as exc:  # a slot no node serves, mid-failover
            raise ClusterFault(str(exc)) from exc
    pool = redis.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        return await _exchange(conn, commands)
    finally:
        await pool.release(conn)


async def _exchange(conn: AbstractConnection, commands: Sequence[Command]) -> list[Any]:
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
    return replies


async def _send_to_owner(cluster: RedisCluster, commands: Sequence[Command]) -> list[Any]:
    if not cluster._topology_ready or cluster._initialize_due():
        await cluster.initialize()
    key = _first_key(commands[0])
    if key is None:  # nothing to place it by: any node answers it
        node = cluster.get_default_node()
    else:
        node = cluster.nodes_manager.get_node_from_slot(cluster.keyslot(key))
    replies = await _on_node(cluster, node, commands)
    for _ in range(REDIRECTS):
        moved = [i for i, r in enumerate(replies) if isinstance(r, AskError)]  # MOVED is one
        if not moved:
            break
        for i in moved:
            replies[i] = await _redirected(cluster, replies[i], commands[i])
    return replies


async def _redirected(cluster: RedisCluster, error: AskError, command: Command) -> Any:
    """`command` sent where `error` points; its reply, or the error reply it met there."""
    if isinstance(error, MovedError):
        await cluster.nodes_manager.move_slot(error)
        node = cluster.nodes_manager.get_node_from_slot(error.slot_id)
        return (await _on_node(cluster, node, [command]))[0]
    known = cluster.get_node(error.host, error.port)
    node = known or ClusterNode(error.host, error.port, **cluster.connection_kwargs)
    try:
        return (await _on_node(cluster, node, [("ASKING",), command]))[1]
    finally:
        if known is None:  # a node the map does not hold yet: its connection is not kept
            await node.disconnect()


async def _on_node(
    cluster: RedisCluster, node: ClusterNode, commands: Sequence[Command]
) -> list[Any]:
    conn = node.acquire_connection()
    try:
        return await _exchange(conn, commands)
    except (RedisConnectionError, OSError):  # a primary gone: the next call asks for the map
        cluster._request_refresh(last_failed_node_name=node.name)
        raise
    finally:
        node.release(conn)


def _first_key(command: Command) -> Any:
    """The key that places `command` (EVALSHA's first key, else its first argument), or None."""
    name = command[0].upper() if isinstance(command[0], str) else command[0].decode().upper()
    at = 3 if name in ("EVALSHA", "EVAL") else 1
    return command[at] if len(command) > at else None


async def _write(conn: AbstractConnection, packed: list[bytes]) -> None:
    """Written now, bounded by the socket timeout (only a full send buffer makes it wait). No
    health check: a connection that died while idle fails this call, which the caller retries
    as any Redis fault; the check's clock read costs a syscall per call."""
    if not conn.is_connected:
        await conn.connect()  # type: ignore[no-untyped-call]
    async with asyncio.timeout(conn.socket_timeout):
        await conn._send_packed_command(packed)
