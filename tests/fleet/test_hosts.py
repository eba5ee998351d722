from __future__ import annotations

import pytest
from redis.asyncio import Redis

from dispatch.clock import FakeClock
from dispatch.fleet.hosts import LiveHosts
from dispatch.queue.keys import host_alive, hosts_registry
from tests.support.polling import eventually
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio


async def register(redis: Redis, prefix: str, host: str, alive_ms: int | None) -> None:
    await redis.sadd(hosts_registry(prefix), host)
    if alive_ms is not None:
        await redis.set(host_alive(host, prefix), "1", px=alive_ms)


def dead_redis() -> Redis:
    return Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)


async def test_an_empty_registry_counts_no_host(redis: Redis, prefix: str) -> None:
    assert await LiveHosts(redis, prefix, FakeClock()).count() == 0


async def test_counts_only_hosts_whose_alive_key_is_present(redis: Redis, prefix: str) -> None:
    await register(redis, prefix, "web-1", 60_000)
    await register(redis, prefix, "web-2", 60_000)
    await register(redis, prefix, "gone", None)  # registered once, never heartbeating now
    await register(redis, prefix, "lapsing", 50)

    async def lapsed() -> bool:
        return not await redis.exists(host_alive("lapsing", prefix))

    await eventually(lapsed)
    assert await LiveHosts(redis, prefix, FakeClock()).count() == 2


async def test_the_count_is_cached_for_cache_s(redis: Redis, prefix: str) -> None:
    clock = FakeClock()
    live = LiveHosts(redis, prefix, clock, cache_s=10.0)
    await register(redis, prefix, "web-1", 60_000)
    assert await live.count() == 1
    await register(redis, prefix, "web-2", 60_000)
    clock.advance(9.9)
    assert await live.count() == 1  # still the cached answer
    clock.advance(0.1)
    assert await live.count() == 2


async def test_a_redis_fault_answers_the_last_known_count(redis: Redis, prefix: str) -> None:
    clock = FakeClock()
    live = LiveHosts(redis, prefix, clock)
    await register(redis, prefix, "web-1", 60_000)
    await register(redis, prefix, "web-2", 60_000)
    assert await live.count() == 2
    dead = dead_redis()
    try:
        live.redis = dead
        clock.advance(11)
        assert await live.count() == 2
    finally:
        await dead.aclose()


async def test_a_redis_fault_before_any_count_answers_one(prefix: str) -> None:
    dead = dead_redis()
    try:
        assert await LiveHosts(dead, prefix, FakeClock()).count() == 1
    finally:
        await dead.aclose()


async def test_a_fault_is_not_retried_within_the_window(redis: Redis, prefix: str) -> None:
    clock = FakeClock()
    dead = dead_redis()
    live = LiveHosts(dead, prefix, clock)
    try:
        assert await live.count() == 1
    finally:
        await dead.aclose()
    await register(redis, prefix, "web-1", 60_000)
    await register(redis, prefix, "web-2", 60_000)
    live.redis = redis
    assert await live.count() == 1  # the fallback holds for its window
    clock.advance(10)
    assert await live.count() == 2
