"""The fleet's copy of run records, read and written outside the finishing script.

A container's outcome is mirrored as soon as it is known, before the claim is ended: if this
daemon dies in between, the job's next pickup finds the record (the settled-record gate) and
finishes with that outcome instead of running the container a second time.
"""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis

from dispatch.keys import DEFAULT_PREFIX, queue_keys
from dispatch.model import RunRecord
from dispatch.records import decode, encode


class RunMirror:
    def __init__(self, redis: Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self.redis = redis
        self.prefix = prefix

    async def put(self, queue: str, record: RunRecord, ended_ms: int) -> None:
        """One round trip; the finishing script trims the mirror later."""
        k = queue_keys(queue, self.prefix)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(k.runs, record.run_id, encode(record))
            pipe.zadd(k.runs_idx, {record.run_id: ended_ms})
            await pipe.execute()

    async def get(self, queue: str, run_id: str) -> RunRecord | None:
        """The mirrored record, or None when there is none or it cannot be read."""
        raw = await self.redis.hget(queue_keys(queue, self.prefix).runs, run_id)
        if raw is None:
            return None
        try:
            return decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
