"""Redis error replies, timeouts and lost connections are faults: they never fail a job, never
spend its attempt, and never end the daemon. Real redis-server behind `RedisProxy`.

Leases first (the renewer, fail-open only when Redis is away, a grant whose reply was lost),
then the gates through the processor, then a real daemon process.
"""

from __future__ import annotations

import anyio
import pytest

from dispatch.errors import RedisUnavailable, RedisUnreachable
from dispatch.fleet.leases import FleetLeases, LeaseSettings, holders
from dispatch.queue.keys import lease_keys
from dispatch.queue.scripts import script
from tests.support.polling import eventually
from tests.support.redis_errors import ERROR_REPLIES, answering_errors

pytestmark = pytest.mark.anyio


def quick(prefix: str, **kw) -> LeaseSettings:
    return LeaseSettings(
        prefix=prefix,
        **{"ttl_s": 2.0, "renew_every_s": 0.1, "retry_s": 0.05, "timeout_s": 0.5, **kw},
    )


async def expiry(redis, name: str, prefix: str, holder: str) -> int:
    return (await holders(redis, lease_keys(name, prefix))).get(holder, 0)


# -- leases -----------------------------------------------------------------------------------


async def test_the_renewer_goes_on_through_error_replies(redis, proxied, proxy, prefix, events):
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        lease = await leases.acquire("gpu", slots=1)
        assert lease is not None and not lease.degraded
        with proxy.fault("error", ERROR_REPLIES["READONLY"]):
            await eventually(lambda: logged(events, "lease_degraded"))
            before = await expiry(redis, "gpu", prefix, lease.holder)
        # shorter than the TTL: the lease is kept, and renewals resume
        await eventually(lambda: expiry_after(redis, prefix, lease.holder, before))
        assert not lease.lost.is_set()
        with proxy.fault("error", ERROR_REPLIES["READONLY"]):  # longer than the TTL: lost
            with anyio.fail_after(10):
                await lease.lost.wait()
        # the renewer ended alone: this body (the daemon's, in assembly) was not cancelled
        again = await leases.acquire("gpu", slots=1)
        assert again is not None and not again.degraded
        await leases.release(again)
    lost = [e["reason"] for e in events("lease_lost")]
    assert lost == ["redis_unavailable"]


async def logged(events, name: str) -> list:
    return events(name)


async def expiry_after(redis, prefix: str, holder: str, before: int) -> bool:
    return await expiry(redis, "gpu", prefix, holder) > before


async def test_an_unreachable_redis_grants_a_degraded_lease(proxied, proxy, prefix) -> None:
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        with proxy.fault("refuse"):
            lease = await leases.acquire("gpu", slots=1)
        assert lease is not None and lease.degraded and lease.fence is None
        await leases.release(lease)


@pytest.mark.parametrize("mode", ["blackhole", *ERROR_REPLIES])
async def test_a_slow_or_erring_redis_grants_nothing(redis, proxied, proxy, prefix, mode):
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        with proxy.fault(
            "blackhole" if mode == "blackhole" else "error", ERROR_REPLIES.get(mode, b"")
        ):
            if mode != "blackhole":
                await answering_errors(proxied)
            with pytest.raises(RedisUnavailable) as raised:
                await leases.acquire("gpu", slots=1)
        assert not isinstance(raised.value, RedisUnreachable)
        assert leases.held() == []
    assert await holders(redis, lease_keys("gpu", prefix)) == {}


async def test_a_degraded_grant_that_reached_redis_is_renewed(redis, proxied, proxy, prefix):
    async with FleetLeases(proxied, quick(prefix, ttl_s=1.0), host="h1") as leases:
        with proxy.fault("refuse"):
            lease = await leases.acquire("gpu", slots=1)
            assert lease is not None and lease.degraded
            # as if the acquire had reached Redis and only its reply was lost
            lk = lease.keys
            granted = await script("lease_acquire")(
                redis, [lk.holders, lk.fence], [lease.holder, 1, 1000]
            )
            assert granted[0] == 1
            first = await expiry(redis, "gpu", prefix, lease.holder)

        async def confirmed() -> bool:
            return lease.backed is True

        await eventually(confirmed, timeout=5)
        assert not lease.degraded
        # kept past the TTL of the lost grant by the renewer, not left to lapse
        await eventually(lambda: expiry_after(redis, prefix, lease.holder, first + 1000))
        assert await leases.release(lease)


async def test_a_degraded_grant_redis_never_saw_stays_degraded(redis, proxied, proxy, prefix):
    async with FleetLeases(proxied, quick(prefix), host="h1") as leases:
        with proxy.fault("refuse"):
            lease = await leases.acquire("gpu", slots=1)
        assert lease is not None

        async def answered() -> bool:
            return lease.backed is False

        await eventually(answered, timeout=5)
        assert lease.degraded and not lease.lost.is_set()
        assert await holders(redis, lease_keys("gpu", prefix)) == {}
        await leases.release(lease)
