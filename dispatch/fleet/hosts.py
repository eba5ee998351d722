"""How many hosts of the fleet are alive, for gates that ask "could another host take this?".

A host is alive while its heartbeat key (`keys.host_alive`) exists; every host that ever ran a
daemon is in the hosts registry. `LiveHosts.count()` is one SMEMBERS plus one pipelined batch of
EXISTS, cached for `cache_s` on the injected clock, so a busy gate costs about one round trip
pair per window. It never raises: on a Redis fault it answers the last known count (1 before
any), and keeps that answer for a window too, so a down Redis is not asked again on every pickup.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.clock import Clock
from dispatch.log import event
from dispatch.queue import keys
from dispatch.queue.heartbeats import heartbeats

_FAULTS = (RedisError, OSError, TimeoutError)


class LiveHosts:
    def __init__(self, redis: Redis, prefix: str, clock: Clock, cache_s: float = 10.0) -> None:
        self.redis = redis
        self.prefix = prefix
        self.clock = clock
        self.cache_s = cache_s
        self._count: int | None = None
        self._read_at = 0.0

    async def count(self) -> int:
        """Hosts whose alive key is present now (cached)."""
        now = self.clock.monotonic()
        if self._count is not None and now - self._read_at < self.cache_s:
            return self._count
        try:
            fresh = await self._read()
        except _FAULTS as exc:
            event("live_hosts_unknown", error=type(exc).__name__, assumed=self._count or 1)
            fresh = self._count or 1
        self._count, self._read_at = fresh, now
        return fresh

    async def _read(self) -> int:
        members = await self.redis.smembers(keys.hosts_registry(self.prefix))
        if not members:
            return 0
        async with self.redis.pipeline(transaction=False) as pipe:
            for host in members:
                name = host.decode() if isinstance(host, bytes) else str(host)
                pipe.exists(keys.host_alive(name, self.prefix))
            alive = await pipe.execute()
        return sum(1 for n in alive if n)


PROFILES_FIELD = "secret_profiles"  # the heartbeat's list of this host's secret profile names


class DeclaredProfiles:
    """Which secret profiles the other live hosts declare, from their heartbeats (names only:
    never a value or a path), read at most once per `cache_s` on the injected clock. A Redis
    fault goes up: the caller's pickup is deferred for it, as any gate's."""

    def __init__(
        self, redis: Redis, prefix: str, host: str, clock: Clock, cache_s: float = 10.0
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.host = host
        self.clock = clock
        self.cache_s = cache_s
        self._seen: dict[str, frozenset[str]] | None = None
        self._read_at = 0.0

    async def hosts_with(self, profiles: set[str]) -> list[str]:
        """The live hosts other than this one that declare every one of `profiles`."""
        now = self.clock.monotonic()
        if self._seen is None or now - self._read_at >= self.cache_s:
            beats = await heartbeats(self.redis, self.prefix)
            self._seen = {h: _names(b.get(PROFILES_FIELD)) for h, b in beats.items()}
            self._read_at = now
        return sorted(h for h, names in self._seen.items() if h != self.host and profiles <= names)


def _names(value: object) -> frozenset[str]:
    if not isinstance(value, list):
        return frozenset()
    return frozenset(v for v in value if isinstance(v, str))
