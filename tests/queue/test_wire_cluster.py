"""`send_all` on a real Redis Cluster: the commands go to the primary that owns their slot, and
a MOVED (a stale slot map) or an ASK (a slot half-way through resharding) is followed to where
it points, so the caller sees the command's own reply, never the redirection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import RedisCluster

from dispatch.queue.connect import redis_client
from dispatch.queue.keys import queue_keys
from dispatch.queue.wire import send_all
from tests.support.redis_cluster import redis_cluster, seed_list

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A cluster of this module's own: its slots are moved and its map made stale on purpose,
    which the session's cluster must never see (tests/conftest.py counts its redirections)."""
    with redis_cluster(tmp_path_factory.mktemp("moving")) as nodes:
        yield seed_list(nodes)


@pytest.fixture
async def cluster(own_cluster: str) -> AsyncIterator[RedisCluster]:
    client = redis_client(own_cluster, 5)
    assert isinstance(client, RedisCluster)
    await client.initialize()
    yield client
    await client.aclose()


async def test_one_queue_s_commands_go_to_the_owner_of_its_slot(
    cluster: RedisCluster, prefix: str
) -> None:
    k = queue_keys("jobs", prefix)
    replies = await send_all(cluster, [("RPUSH", k.wait, "a"), ("LLEN", k.wait), ("PING",)])
    assert replies[:2] == [1, 1] and replies[2] in (True, b"PONG")
    assert await cluster.lrange(k.wait, 0, -1) == [b"a"]


async def test_a_stale_slot_map_s_moved_is_followed(cluster: RedisCluster, prefix: str) -> None:
    k = queue_keys("jobs", prefix)
    slot = cluster.keyslot(k.wait)
    owner = cluster.nodes_manager.slots_cache[slot][0]
    stranger = next(n for n in cluster.get_primaries() if n.name != owner.name)
    cluster.nodes_manager.slots_cache[slot] = [stranger]  # the map a failover leaves behind
    replies = await send_all(cluster, [("RPUSH", k.wait, "a"), ("RPUSH", k.wait, "b")])
    assert replies == [1, 2]  # each MOVED reply sent again to the owner, in order
    assert cluster.nodes_manager.slots_cache[slot][0].name == owner.name  # the map mended
    assert await cluster.lrange(k.wait, 0, -1) == [b"a", b"b"]


async def test_an_ask_during_resharding_is_followed_with_asking(
    cluster: RedisCluster, prefix: str
) -> None:
    k = queue_keys("jobs", prefix)
    slot = cluster.keyslot(k.wait)
    source = cluster.nodes_manager.slots_cache[slot][0]
    target = next(n for n in cluster.get_primaries() if n.name != source.name)
    source_id, target_id = [await cluster.cluster_myid(n) for n in (source, target)]
    await _setslot(cluster, target, slot, "IMPORTING", source_id)
    await _setslot(cluster, source, slot, "MIGRATING", target_id)
    # a key the source does not hold is answered ASK: it may be on the target by now
    assert await send_all(cluster, [("RPUSH", k.wait, "a")]) == [1]
    assert await cluster.cluster_countkeysinslot(slot) == 0  # asked of the source: not there
    for node in (target, source):  # the move ends: the slot, and the list, are the target's
        await _setslot(cluster, node, slot, "NODE", target_id)
    assert await cluster.lrange(k.wait, 0, -1) == [b"a"]  # redis-py follows the MOVED here


async def _setslot(cluster: RedisCluster, node: object, slot: int, *how: str | bytes) -> None:
    await cluster.execute_command("CLUSTER SETSLOT", slot, *how, target_nodes=node)
