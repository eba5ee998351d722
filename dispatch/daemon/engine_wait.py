"""Holding a job whose run never started because the container engine could not be reached.

An engine away for a few seconds (a dockerd restart, an upgrade, a full socket backlog) must
not spend the attempts of every job picked up meanwhile: a run that never started for that
reason is deferred `engine-unavailable` (no attempt spent) instead of retried. Re-checks back
off: the first after ENGINE_DELAY_MS, then after about half the time waited so far, at most
ENGINE_DELAY_CAP_MS, so a long outage costs a few pickups an hour per job rather than one every
few seconds.

The hold is bounded. The finishing script keeps the defer record's `since` across deferrals
for the same reason (lua/job_finish.lua), so `since` is when the job first waited for the
engine; once it has waited `max_wait_ms` (DISPATCH_ENGINE_WAIT_MAX) it takes the ordinary
infra retry, spending an attempt. That retry's record names another reason, so the next
attempt waits afresh: an engine gone for good fails a job after about `attempts` times the
bound, not at once and not never. A wait broken by another deferral (a busy scope, say) also
starts afresh.

The previous record is read with one HGET, only on this path. If Redis does not answer, the
job counts as first waiting now: this pickup holds it, and the script still keeps the stored
`since`, so the bound holds from the next pickup on.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from redis.asyncio import Redis

from dispatch.clock import Clock
from dispatch.errors import RedisUnavailable
from dispatch.gates.base import ENGINE_DELAY_MS, Defer
from dispatch.log import event
from dispatch.model import DeferRecord
from dispatch.queue.faults import redis_call
from dispatch.queue.keys import queue_keys
from dispatch.queue.transitions import Claim
from dispatch.reasons import ENGINE_UNAVAILABLE, max_delay_ms

ENGINE_DELAY_CAP_MS = max_delay_ms(ENGINE_UNAVAILABLE)

_record = msgspec.json.Decoder(DeferRecord)


class EngineWait:
    def __init__(self, redis: Redis, prefix: str, max_wait_ms: int, clock: Clock) -> None:
        self.redis = redis
        self.prefix = prefix
        self.max_wait_ms = max_wait_ms
        self.clock = clock

    async def hold(self, claim: Claim) -> Defer | None:
        """The deferral for a run the engine never answered; None once the job waited long
        enough and should take the infra retry."""
        now = self.clock.now_ms()
        waited = now - (await self._since(claim) or now)
        left = self.max_wait_ms - waited
        if left <= 0:
            event("engine_wait_over", job=claim.id, waited_ms=waited)
            return None
        backoff = min(max(ENGINE_DELAY_MS, waited // 2), ENGINE_DELAY_CAP_MS)
        detail = f"retried as infra after {self.max_wait_ms // 1000} s of waiting"
        return Defer(min(backoff, left), ENGINE_UNAVAILABLE, detail=detail)

    async def _since(self, claim: Claim) -> int | None:
        """When the job first waited for the engine (epoch ms), if it is waiting already."""
        key = queue_keys(claim.queue, self.prefix).defer
        try:
            with redis_call("engine wait"):
                raw = await self.redis.hget(key, claim.id)
        except RedisUnavailable as exc:
            event("engine_wait_unread", job=claim.id, error=str(exc))
            return None
        return since_ms(raw)


def since_ms(raw: bytes | str | None) -> int | None:
    """The instant an `engine-unavailable` defer record says the wait began; None for any
    other record, or one that does not decode."""
    if not raw:
        return None
    try:
        record = _record.decode(raw)
        if record.reason != ENGINE_UNAVAILABLE:
            return None
        return int(datetime.fromisoformat(record.since or record.at).timestamp() * 1000)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None
