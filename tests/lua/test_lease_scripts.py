"""The lease scripts called directly with explicit KEYS and ARGV, every return code included,
and once each through `redis-cli --eval` to prove they stand alone (no dispatch Python)."""

from __future__ import annotations

import subprocess
import time
import uuid
from urllib.parse import urlparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.queue.keys import lease_keys
from dispatch.queue.scripts import Code, lua_dir, script
from tests.support.polling import eventually
from tests.support.redis_server import sync_client

BAD = Code.BAD_INPUT
pytestmark = pytest.mark.anyio


async def call(redis, name, keys, args):
    return await script(name)(redis, keys, args)


async def acquire(redis, lk, holder, slots=1, ttl_ms=10_000):
    return await call(redis, "lease_acquire", [lk.holders, lk.fence], [holder, slots, ttl_ms])


def test_headers_match_what_the_wrapper_passes() -> None:
    # dispatch.fleet.leases passes exactly these counts; the contract in lua/README.md says the same
    expected = {"lease_acquire": (2, 4), "lease_renew": (1, 2), "lease_release": (1, 1)}
    expected["lease_holders"] = (1, 0)
    for name, (n_keys, n_args) in expected.items():
        assert (script(name).declared("KEYS"), script(name).declared("ARGV")) == (n_keys, n_args)


async def test_acquire_grants_up_to_n_then_reports_full(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    assert (await acquire(redis, lk, "a", slots=2))[0] == 1
    assert (await acquire(redis, lk, "b", slots=2))[0] == 1
    assert await acquire(redis, lk, "c", slots=2) == [0, 2]
    assert await redis.zcard(lk.holders) == 2


async def test_fences_strictly_increase(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    fences = []
    for i in range(5):
        granted, fence = await acquire(redis, lk, f"h{i}", slots=1)
        assert granted == 1
        fences.append(fence)
        assert await call(redis, "lease_release", [lk.holders], [f"h{i}"]) == 1
    assert fences == sorted(set(fences)) and fences[0] >= 1


async def test_reacquire_by_the_same_holder_takes_no_second_slot(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    first = await acquire(redis, lk, "a", slots=2, ttl_ms=1_000)
    again = await acquire(redis, lk, "a", slots=2, ttl_ms=60_000)
    assert first[0] == again[0] == 1 and again[1] > first[1]
    assert await redis.zcard(lk.holders) == 1
    assert await redis.zscore(lk.holders, "a") > time.time() * 1000 + 30_000  # refreshed
    # a full lease still re-grants its current holder
    assert (await acquire(redis, lk, "b", slots=2))[0] == 1
    assert (await acquire(redis, lk, "a", slots=2))[0] == 1
    assert await acquire(redis, lk, "c", slots=2) == [0, 2]


async def test_expiry_frees_a_slot(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    assert (await acquire(redis, lk, "a", slots=1, ttl_ms=150))[0] == 1
    assert await acquire(redis, lk, "b", slots=1) == [0, 1]

    async def granted() -> bool:
        return (await acquire(redis, lk, "b", slots=1))[0] == 1

    await eventually(granted, timeout=5.0)  # server time decides when a has expired
    assert await call(redis, "lease_renew", [lk.holders], ["a", 1000]) == 0
    assert await call(redis, "lease_release", [lk.holders], ["a"]) == 0


async def test_holders_key_lapses_with_its_last_holder_and_fence_stays(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    await acquire(redis, lk, "a", slots=2, ttl_ms=5_000)
    await acquire(redis, lk, "b", slots=2, ttl_ms=60_000)
    await acquire(redis, lk, "a", slots=2, ttl_ms=5_000)  # must not shorten b's key lifetime
    assert 30_000 < await redis.pttl(lk.holders) <= 60_000
    assert await call(redis, "lease_renew", [lk.holders], ["a", 90_000]) == 1
    assert 60_000 < await redis.pttl(lk.holders) <= 90_000
    assert await redis.pttl(lk.fence) == -1


async def test_renew(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    await acquire(redis, lk, "a", ttl_ms=1_000)
    assert await call(redis, "lease_renew", [lk.holders], ["a", 60_000]) == 1
    assert await redis.zscore(lk.holders, "a") > time.time() * 1000 + 30_000
    assert await call(redis, "lease_renew", [lk.holders], ["stranger", 60_000]) == 0
    assert await redis.zscore(lk.holders, "stranger") is None
    # an expired holder is no holder, even before anyone purged it
    await redis.zadd(lk.holders, {"a": 1})
    assert await call(redis, "lease_renew", [lk.holders], ["a", 60_000]) == 0


async def test_release_is_idempotent_and_spares_other_holders(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    await acquire(redis, lk, "a", slots=2)
    await acquire(redis, lk, "b", slots=2)
    assert await call(redis, "lease_release", [lk.holders], ["a"]) == 1
    assert await call(redis, "lease_release", [lk.holders], ["a"]) == 0
    assert await call(redis, "lease_release", [lk.holders], ["stranger"]) == 0
    assert [m.decode() for m in await redis.zrange(lk.holders, 0, -1)] == ["b"]


async def test_holders_lists_live_holders_only(redis, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    assert len(await call(redis, "lease_holders", [lk.holders], [])) == 1  # just now_ms
    await acquire(redis, lk, "a", slots=3, ttl_ms=10_000)
    await acquire(redis, lk, "b", slots=3, ttl_ms=20_000)
    await redis.zadd(lk.holders, {"dead": 1})
    now_ms, *rest = await call(redis, "lease_holders", [lk.holders], [])
    assert abs(now_ms - time.time() * 1000) < 5_000
    assert [rest[0], rest[2]] == [b"a", b"b"]
    assert now_ms + 9_000 < rest[1] <= now_ms + 10_000 < rest[3]


BAD_CALLS = [
    ("lease_acquire", ["h"], ["a", 1, 1000]),  # one key missing
    ("lease_acquire", ["h", "f"], ["a", 1]),  # one arg missing
    ("lease_acquire", ["h", "f"], ["", 1, 1000]),
    ("lease_acquire", ["h", "f"], ["a", 0, 1000]),
    ("lease_acquire", ["h", "f"], ["a", -1, 1000]),
    ("lease_acquire", ["h", "f"], ["a", 1.5, 1000]),
    ("lease_acquire", ["h", "f"], ["a", "two", 1000]),
    ("lease_acquire", ["h", "f"], ["a", 1, 0]),
    ("lease_acquire", ["h", "f"], ["a", 1, "inf"]),
    ("lease_acquire", ["h", "f"], ["a", 1, "nan"]),
    ("lease_renew", ["h"], ["a"]),
    ("lease_renew", ["h"], ["", 1000]),
    ("lease_renew", ["h"], ["a", -5]),
    ("lease_renew", ["h", "f"], ["a", 1000]),
    ("lease_release", ["h"], [""]),
    ("lease_release", ["h"], []),
    ("lease_release", [], ["a"]),
    ("lease_holders", [], []),
    ("lease_holders", ["h"], ["extra"]),
]


@pytest.mark.parametrize(("name", "keys", "args"), BAD_CALLS)
async def test_bad_input_is_refused_before_any_write(redis, prefix, name, keys, args) -> None:
    keys = [f"{{{prefix}}}:{k}" for k in keys]
    assert await call(redis, name, keys, args) == BAD
    assert await redis.keys(f"{{{prefix}}}*") == []


# --- random interleavings against a model -------------------------------------------------

OPS = st.tuples(st.sampled_from(["acquire", "renew", "release", "expire"]), st.integers(0, 7))


def run_ops(client, slots, ops):
    lk = lease_keys(uuid.uuid4().hex, "hyp")
    live: set[str] = set()  # the model: who holds now
    last_fence = 0
    names = ("lease_acquire", "lease_renew", "lease_release")
    src = {n: client.register_script(script(n).source) for n in names}
    for op, n in ops:
        holder = f"h{n}"
        if op == "acquire":
            granted, value = src["lease_acquire"]([lk.holders, lk.fence], [holder, slots, 60_000])
            assert granted == (holder in live or len(live) < slots)
            if granted:
                assert value > last_fence
                last_fence = value
                live.add(holder)
            else:
                assert value == len(live) == slots
        elif op == "renew":
            assert src["lease_renew"]([lk.holders], [holder, 60_000]) == (holder in live)
        elif op == "release":
            assert src["lease_release"]([lk.holders], [holder]) == (holder in live)
            live.discard(holder)
        elif holder in live:  # expiry, forced on the server's terms: score in the past
            client.zadd(lk.holders, {holder: 1}, xx=True)
            live.discard(holder)
        # forced expiries sit at score 1, live holders 60 s ahead: the set above 1 is the model
        present = {m.decode() for m in client.zrangebyscore(lk.holders, "(1", "+inf")}
        assert present == live and len(present) <= slots
    client.delete(lk.holders, lk.fence)


@settings(max_examples=75, deadline=None)
@given(slots=st.integers(1, 4), ops=st.lists(OPS, max_size=60))
def test_random_interleavings_never_exceed_n(redis_url, slots, ops) -> None:
    client = sync_client(redis_url)
    try:
        run_ops(client, slots, ops)
    finally:
        client.close()


# --- standing alone ----------------------------------------------------------------------


def _owner(redis_url: str, key: str) -> tuple[str, int]:
    """Where `key` lives: the one server, or the cluster node that owns its slot."""
    if "," not in redis_url:
        url = urlparse(redis_url)
        return str(url.hostname), int(url.port or 6379)
    with sync_client(redis_url) as cluster:
        node = cluster.get_node_from_key(key)
        return node.host, node.port


def cli(redis_url, name, keys, args):
    host, port = _owner(redis_url, keys[0])
    command = ["redis-cli", "-h", host, "-p", str(port), "--no-raw", "--eval"]
    command += [str(lua_dir() / f"{name}.lua"), *keys, ",", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()


def test_each_script_runs_through_redis_cli(redis_url, prefix) -> None:
    lk = lease_keys("gpu", prefix)
    holders, fence = lk.holders, lk.fence
    assert cli(redis_url, "lease_acquire", [holders, fence], ["a", 1, 60000]) == (
        "1) (integer) 1\n2) (integer) 1"
    )
    assert cli(redis_url, "lease_acquire", [holders, fence], ["b", 1, 60000]) == (
        "1) (integer) 0\n2) (integer) 1"
    )
    assert cli(redis_url, "lease_renew", [holders], ["a", 60000]) == "(integer) 1"
    assert '2) "a"' in cli(redis_url, "lease_holders", [holders], [])
    assert cli(redis_url, "lease_release", [holders], ["a"]) == "(integer) 1"
    assert cli(redis_url, "lease_release", [holders], ["a"]) == "(integer) 0"
    assert cli(redis_url, "lease_renew", [holders], ["a", 60000]) == "(integer) 0"
    assert cli(redis_url, "lease_acquire", [holders, fence], ["", 1, 60000]) == "(integer) -4"
