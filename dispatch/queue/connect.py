"""The daemon's Redis clients: redis-py asyncio, with commands packed by hiredis.

redis-py packs every command in pure Python (several microseconds per command, the largest
single cost of a busy daemon's hot path); `hiredis.pack_command` does the same in C. The
bytes on the wire are the same: with the default UTF-8 encoding, str, bytes, int and float
arguments go to hiredis as they are (it writes them as the encoder would, at a third of the
cost for a finish of 50 jobs); anything else, or another encoding, goes through the
connection's own encoder first. A first argument holding spaces ('CONFIG GET') is split as
redis-py splits it.
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)


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
    """Timeouts everywhere: a silent server must surface as an error, never as a hang."""
    pool = ConnectionPool.from_url(
        url, socket_connect_timeout=5, socket_timeout=socket_timeout, health_check_interval=30
    )
    # from_url picks the class by the URL's scheme (redis, rediss, unix): swap in its twin
    pool.connection_class = FAST.get(pool.connection_class, pool.connection_class)
    return Redis.from_pool(pool)
