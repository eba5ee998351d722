"""The host name scripts called directly with explicit KEYS and ARGV, every return code included.

"Nothing written" is checked with a DUMP of every key under the test's prefix before and after,
and with the owner key's TTL, which must not have grown.
"""

from __future__ import annotations

import pytest

from dispatch.queue.keys import host_keys
from dispatch.queue.scripts import Code, script

pytestmark = pytest.mark.anyio
BAD = Code.BAD_INPUT
TTL = 60_000


async def take(redis, key, value, ttl_ms=TTL, stale=""):
    return await script("host_take")(redis, [key], [value, ttl_ms, stale])


async def release(redis, key, value):
    return await script("host_release")(redis, [key], [value])


async def snapshot(redis, prefix) -> dict[bytes, bytes]:
    keys = sorted(await redis.keys(f"{prefix}:*"))
    return {key: await redis.dump(key) for key in keys}


async def assert_writes_nothing(redis, prefix, key, call) -> None:
    before, ttl = await snapshot(redis, prefix), await redis.pttl(key)
    await call()
    assert await snapshot(redis, prefix) == before
    assert await redis.pttl(key) <= ttl


@pytest.fixture
def key(prefix) -> str:
    return host_keys("h1", prefix).owner


def test_headers_match_what_the_wrapper_passes() -> None:
    # dispatch.daemon.instance.HostOwner passes exactly these counts
    for name, counts in {"host_take": (1, 3), "host_release": (1, 1)}.items():
        assert (script(name).declared("KEYS"), script(name).declared("ARGV")) == counts


async def test_a_free_name_is_taken_then_renewed_by_the_same_value(redis, key) -> None:
    assert await take(redis, key, "a", ttl_ms=5_000) == [2, b"a"]
    assert 0 < await redis.pttl(key) <= 5_000
    assert await take(redis, key, "a", ttl_ms=TTL) == [1, b"a"]
    assert 5_000 < await redis.pttl(key) <= TTL
    assert await redis.get(key) == b"a"


async def test_a_name_held_by_another_value_is_refused_and_left_alone(redis, key, prefix) -> None:
    await take(redis, key, "a")

    async def refused() -> None:
        assert await take(redis, key, "b") == [0, b"a"]
        assert await take(redis, key, "b", stale="someone-else") == [0, b"a"]

    await assert_writes_nothing(redis, prefix, key, refused)


async def test_the_stale_value_of_a_dead_process_is_taken_over(redis, key) -> None:
    await take(redis, key, "dead")
    assert await take(redis, key, "b", stale="dead") == [2, b"b"]
    assert await redis.get(key) == b"b"
    assert await take(redis, key, "c", stale="dead") == [0, b"b"]  # once only


async def test_release_only_by_the_holding_value(redis, key, prefix) -> None:
    await take(redis, key, "a")

    async def refused() -> None:
        assert await release(redis, key, "b") == 0

    await assert_writes_nothing(redis, prefix, key, refused)
    assert await release(redis, key, "a") == 1
    assert not await redis.exists(key)
    assert await release(redis, key, "a") == 0  # nothing held: nothing to do


BAD_TAKE = {
    "empty value": ["", TTL, ""],
    "zero ttl": ["a", 0, ""],
    "text ttl": ["a", "long", ""],
    "nan ttl": ["a", "nan", ""],
    "fractional ttl": ["a", 1.5, ""],
    "no stale": ["a", TTL],
    "extra": ["a", TTL, "", "x"],
}


@pytest.mark.parametrize("args", BAD_TAKE.values(), ids=BAD_TAKE.keys())
async def test_take_bad_input_writes_nothing(redis, key, prefix, args) -> None:
    await take(redis, key, "a", ttl_ms=5_000)

    async def bad() -> None:
        assert await script("host_take")(redis, [key], args) == BAD

    await assert_writes_nothing(redis, prefix, key, bad)


@pytest.mark.parametrize("args", [[""], [], ["a", "b"]], ids=["empty", "none", "two"])
async def test_release_bad_input_writes_nothing(redis, key, prefix, args) -> None:
    await take(redis, key, "a")

    async def bad() -> None:
        assert await script("host_release")(redis, [key], args) == BAD

    await assert_writes_nothing(redis, prefix, key, bad)
