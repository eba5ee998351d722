"""Who holds a wait identity, fleet-wide: one Redis key per identity naming the holding job
("<queue> <job id>") with a TTL, and a second key naming the job whose wait on it cleared.

A job claims its identity before it holds (tier 1) or checks (tier 2) and keeps it across its
holds; it gives it back when its wait clears or is refused. Another job with the same identity
is refused `wait-superseded` while the holder is live. Liveness is read from the holder's
queue: a job that still has a document there and is not finished is live. A holder that ended
without giving the claim back (cancelled, failed, crashed) is taken over, and that is logged;
one whose liveness cannot be read leaves the question open (the gate asks again in 15 s).

Taking over and giving back compare and swap with WATCH/MULTI on the one key, so two daemons
never both take one claim and none deletes a claim another job took meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis
from redis.exceptions import WatchError

from dispatch.queue.faults import REDIS_FAULTS, redis_call
from dispatch.queue.keys import DEFAULT_PREFIX, queue_keys, wait_claim, wait_cleared


@dataclass(frozen=True, slots=True)
class Claimed:
    kind: Literal["held", "superseded", "unknown"]
    holder: str | None = None  # the other job, for superseded and unknown
    took_over: str | None = None  # a dead holder whose claim this one took


class IdentityClaims:
    def __init__(self, redis: Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self.redis = redis
        self.prefix = prefix

    async def cleared_by(self, identity: str) -> str | None:
        with redis_call("wait cleared get"):
            return _text(await self.redis.get(wait_cleared(identity, self.prefix)))

    async def mark_cleared(self, identity: str, job_id: str, ttl_ms: int) -> None:
        with redis_call("wait cleared set"):
            await self.redis.set(wait_cleared(identity, self.prefix), job_id, px=ttl_ms)

    async def claim(self, identity: str, queue: str, job_id: str, ttl_ms: int) -> Claimed:
        """Hold `identity` for the job, or say who holds it."""
        key, mine = wait_claim(identity, self.prefix), f"{queue} {job_id}"
        with redis_call("wait claim"):
            current = _text(await self.redis.get(key))
            if current == mine:
                await self.redis.pexpire(key, ttl_ms)
                return Claimed("held")
            if current is None:
                taken = await self.redis.set(key, mine, nx=True, px=ttl_ms)
                return Claimed("held") if taken else Claimed("unknown")
        return await self._against(key, current, mine, ttl_ms)

    async def _against(self, key: str, current: str, mine: str, ttl_ms: int) -> Claimed:
        queue, _, holder = current.partition(" ")
        try:
            live = await self.is_live(queue, holder)
        except REDIS_FAULTS:
            return Claimed("unknown", holder)
        if live:
            return Claimed("superseded", holder)
        with redis_call("wait claim takeover"):
            taken = await self._swap(key, current, mine, ttl_ms)
        return Claimed("held", took_over=holder) if taken else Claimed("unknown", holder)

    async def release(self, identity: str, queue: str, job_id: str) -> bool:
        """Give the claim back if this job holds it; False if it does not (or no longer)."""
        key = wait_claim(identity, self.prefix)
        with redis_call("wait claim release"):
            return await self._swap(key, f"{queue} {job_id}", None, 0)

    async def holder(self, identity: str) -> str | None:
        with redis_call("wait claim get"):
            return _text(await self.redis.get(wait_claim(identity, self.prefix)))

    async def is_live(self, queue: str, job_id: str) -> bool:
        if not queue or not job_id:
            return False  # not a value this module wrote: nobody holds it
        k = queue_keys(queue, self.prefix)
        async with self.redis.pipeline(transaction=False) as p:
            p.hexists(k.data, job_id)
            p.zscore(k.done, job_id)
            known, done = await p.execute()
        return bool(known) and done is None

    async def _swap(self, key: str, expect: str, new: str | None, ttl_ms: int) -> bool:
        """Set (or with None, delete) `key` only while it holds `expect`."""
        async with self.redis.pipeline(transaction=True) as p:
            await p.watch(key)
            if _text(await p.get(key)) != expect:
                await p.unwatch()  # type: ignore[no-untyped-call]
                return False
            p.multi()  # type: ignore[no-untyped-call]
            if new is None:
                p.delete(key)
            else:
                p.set(key, new, px=ttl_ms)
            try:
                await p.execute()
            except WatchError:
                return False
        return True


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
