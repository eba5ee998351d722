"""Which client a URL gets: a cluster's for a node of a real cluster (asked), for a seed list or
a +cluster URL (said), even while the first seed is down; one server's otherwise. And the
cluster client, like the one-server client, never sends a failed call again by itself."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import TimeoutError as RedisTimeout

from dispatch.client import Client
from dispatch.config.settings import Settings
from dispatch.queue.connect import open_redis, redis_client
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio


async def test_the_server_is_asked_what_it_is(
    redis_url: str, redis_kind: str, cluster_url: str
) -> None:
    first_node = cluster_url.split(",")[0]
    for url, kind in ((redis_url, redis_kind), (first_node, "cluster")):
        client = await open_redis(url, 5)
        try:
            assert isinstance(client, RedisCluster) == (kind == "cluster"), url
            assert await client.ping()
        finally:
            await client.aclose()


async def test_a_seed_list_starts_while_its_first_seed_is_down(cluster_url: str) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    seeds = ",".join([dead, *(urlsplit(u).netloc for u in cluster_url.split(",")[:1])])
    client = redis_client(seeds, 5)
    try:
        assert isinstance(client, RedisCluster)
        await client.set("{seeds}:k", "v")
        assert await client.get("{seeds}:k") == b"v"
    finally:
        await client.aclose()


async def test_a_client_from_settings_becomes_a_cluster_s_on_entry(
    cluster_url: str, prefix: str
) -> None:
    node = cluster_url.split(",")[0]
    settings = Settings(redis_url=node, embedded=False, prefix=prefix, host="h")
    async with Client.from_settings(settings) as client:
        assert isinstance(client.redis, RedisCluster)
        assert "jobs" in await client.queues()  # the registry read, from its own node


async def test_a_call_that_timed_out_is_not_sent_again(cluster_url: str, prefix: str) -> None:
    """CLIENT PAUSE holds every write on the key's node past the client's timeout: the call
    fails at its timeout and nothing is sent again, not even a reconnect to send it on
    (redis-py's cluster client, left to itself, reconnects and resends it ten times)."""
    key = "{" + prefix + "}:counter"
    client = redis_client(cluster_url, socket_timeout=0.3)
    assert isinstance(client, RedisCluster)
    try:
        await client.get(key)  # the map read and a pooled connection to the key's node
        owner = client.nodes_manager.get_node_from_slot(client.keyslot(key))
        with SyncRedis(host=owner.host, port=owner.port) as admin:
            accepted = admin.info("stats")["total_connections_received"]
            admin.execute_command("CLIENT", "PAUSE", 20_000, "WRITE")
            try:
                with pytest.raises(RedisTimeout):
                    await client.incr(key)
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
            assert admin.info("stats")["total_connections_received"] == accepted
    finally:
        await client.aclose()


async def test_a_plain_redis_of_the_same_url_is_what_redis_client_gives_one_server(
    redis_url: str, redis_kind: str
) -> None:
    if redis_kind == "cluster":
        pytest.skip("one server's case")
    client = redis_client(redis_url, 5)
    try:
        assert type(client) is Redis
    finally:
        await client.aclose()
