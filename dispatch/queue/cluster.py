"""The cluster client: redis-py's `RedisCluster` with three changes dispatch needs.

- Its own refusals (no seed reachable, a slot no node serves, a call's keys in several slots)
  are raised as `ClusterFault`, a `RedisError`, so every caller that handles a Redis fault
  handles them (redis-py raises them outside `RedisError`).
- A failed call is never sent again by the client, as on one server (redis-py would resend a
  timed-out call ten times): a claim or a finish whose reply was lost may have run, which only
  its caller can tell. MOVED and ASK are still followed, and the slot map refreshed.
- A command waits for the slot map before it is routed: redis-py decides where a command goes
  before it has read the map, so a fresh client's first EVALSHA or BZPOPMIN (and every other
  task's while one task reads the map) went to any node, which answered MOVED.

It is handed around typed as `Redis` (queue/connect.py says why).
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode, ClusterPipeline
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError


class ClusterFault(RedisError):
    """A cluster client's own refusal (no seed reachable, a slot no node serves, keys of one
    call in several slots), which redis-py raises outside `RedisError`: as one, every caller
    that handles a Redis fault handles it."""


class _FaultsAsRedisErrors(ClusterPipeline):
    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        try:
            if not self.cluster_client._topology_ready:  # as Cluster.execute_command says
                await self.cluster_client.initialize()
            return await super().execute(raise_on_error, allow_redirections)
        except RedisClusterException as exc:
            raise ClusterFault(str(exc)) from exc


class Cluster(RedisCluster):
    """redis-py's cluster client, its refusals `ClusterFault`s, its first calls routed by the
    slot map (the module docstring)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            if not self._topology_ready:  # a refresh asked for later, redis-py runs itself
                await super().initialize()
            return await super().execute_command(*args, **kwargs)
        except RedisClusterException as exc:
            raise ClusterFault(str(exc)) from exc

    async def initialize(self, *args: Any, **kwargs: Any) -> Cluster:
        try:
            await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            raise ClusterFault(str(exc)) from exc
        return self

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        if shard_hint:
            raise ClusterFault("a cluster pipeline takes no shard hint")
        return _FaultsAsRedisErrors(self, transaction)  # type: ignore[abstract]


def cluster_client(seeds: tuple[str, ...], socket_timeout: float) -> Redis:
    """The first seed gives the credentials and options; every seed is a start-up node."""
    nodes = [ClusterNode(*_host_port(url)) for url in seeds[1:]]
    cluster = Cluster.from_url(
        seeds[0],
        startup_nodes=nodes,
        retry=Retry(NoBackoff(), 0),  # nothing sent again (the module docstring)
        socket_connect_timeout=5,
        socket_timeout=socket_timeout,
        health_check_interval=30,
    )
    return cast(Redis, cluster)


def _host_port(url: str) -> tuple[str, int]:
    parsed = urlsplit(url)
    return parsed.hostname or "localhost", parsed.port or 6379
