"""The daemon's Redis clients: redis-py asyncio, with commands packed by hiredis.

redis-py packs every command in pure Python (several microseconds per command, the largest
single cost of a busy daemon's hot path); `hiredis.pack_command` does the same in C. The
bytes on the wire are the same: with the default UTF-8 encoding, str, bytes, int and float
arguments go to hiredis as they are (it writes them as the encoder would, at a third of the
cost for a finish of 50 jobs); anything else, or another encoding, goes through the
connection's own encoder first. A first argument holding spaces ('CONFIG GET') is split as
redis-py splits it.

A Redis Cluster is served through redis-py's `RedisCluster` (queue/cluster.py), built from the
seeds of DISPATCH_REDIS_URL (config/redis_target.py). It is handed around typed as `Redis`: it
answers the same commands, and the few places that reach below them (`wire.send_all`, a
script load, TIME in a pipeline) ask `is_cluster` first.
"""

from __future__ import annotations

import asyncio
from typing import Any

import hiredis
from redis.asyncio import ConnectionPool, Redis, RedisCluster
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)

from dispatch.config.redis_target import redis_target
from dispatch.queue.cluster import cluster_client


class FastPacking:
    """Mixin for a redis-py asyncio connection class: `pack_command` through hiredis."""

    encoder: Any

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str):
            args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        if self.encoder.encoding in _UTF8 and self.encoder.encoding_errors == "strict":
            try:  # str, bytes, int and float: hiredis writes them as the encoder would
                return [hiredis.pack_command(args)]
            except TypeError:  # anything else goes through the encoder, which says what
                pass
        encode = self.encoder.encode
        return [hiredis.pack_command(tuple([encode(a) for a in args]))]


_UTF8 = frozenset({"utf-8", "utf8", "UTF-8"})


class FastConnection(FastPacking, Connection):
    pass


class FastSSLConnection(FastPacking, SSLConnection):
    pass


class FastUnixDomainSocketConnection(FastPacking, UnixDomainSocketConnection):
    pass


FAST: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: FastConnection,
    SSLConnection: FastSSLConnection,
    UnixDomainSocketConnection: FastUnixDomainSocketConnection,
}


def redis_client(url: str, socket_timeout: float) -> Redis:
    """A client of the target `url` names, without asking it what it is: a cluster when the URL
    says so (a +cluster scheme, several seeds), else one server. `open_redis` asks.

    Timeouts everywhere: a silent server must surface as an error, never as a hang."""
    target = redis_target(url)
    if target.cluster:
        return cluster_client(target.urls, socket_timeout)
    return _server_client(target.urls[0], socket_timeout)


async def open_redis(url: str, socket_timeout: float) -> Redis:
    """A client of the target `url` names, a cluster's when the server says it is a node of one
    (`INFO cluster`). A server that cannot be asked raises, as its first command would."""
    redis = redis_client(url, socket_timeout)
    try:
        return await settled(redis, url, socket_timeout)
    except BaseException:
        await redis.aclose()
        raise


async def settled(redis: Redis, url: str, socket_timeout: float) -> Redis:
    """`redis` (a client of `url` from `redis_client`), or, when the one server it names is a
    node of a cluster, a cluster client in its place (`redis` is closed). One round trip, and
    none for a cluster already known or a unix socket (which a cluster client cannot use).
    A server that cannot be asked raises, `redis` left open."""
    if is_cluster(redis) or url.startswith("unix://"):
        return redis
    info = await redis.info("cluster")
    if str(info.get("cluster_enabled", "0")) != "1":
        return redis
    await redis.aclose()
    return cluster_client(redis_target(url).urls, socket_timeout)


def client_like(redis: Redis, url: str, socket_timeout: float) -> Redis:
    """Another client of `url`, of the kind `open_redis` found `redis` to be, without asking."""
    target = redis_target(url)
    if is_cluster(redis):
        return cluster_client(target.urls, socket_timeout)
    return _server_client(target.urls[0], socket_timeout)


async def with_time(redis: Redis, pipe: Pipeline) -> tuple[Any, list[Any]]:
    """The server's TIME reply and the pipeline's replies, read in one round trip: TIME joins
    the pipeline on one server; a cluster's pipeline takes no keyless command, so there it is
    asked of a node alongside (its nodes keep their own clocks, as close as NTP holds them)."""
    if is_cluster(redis):
        time, replies = await asyncio.gather(redis.time(), pipe.execute())
        return time, replies
    pipe.time()
    *replies, time = await pipe.execute()
    return time, replies


def is_cluster(redis: Redis) -> bool:
    return isinstance(redis, RedisCluster)


def _server_client(url: str, socket_timeout: float) -> Redis:
    pool = ConnectionPool.from_url(
        url, socket_connect_timeout=5, socket_timeout=socket_timeout, health_check_interval=30
    )
    # from_url picks the class by the URL's scheme (redis, rediss, unix): swap in its twin
    pool.connection_class = FAST.get(pool.connection_class, pool.connection_class)
    return Redis.from_pool(pool)
