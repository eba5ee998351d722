"""Run records in the fleet mirror as the claim that ran them left them."""

from __future__ import annotations

import re

from redis.asyncio import Redis

from dispatch.model import RunRecord
from dispatch.queue.keys import queue_keys
from dispatch.records.disk_log import encode
from dispatch.records.mirror import RunMirror

TOKEN = re.compile(r"^[\w.-]+:\d+$")


async def hold(redis: Redis, prefix: str, queue: str, job_id: str, token: str) -> None:
    """The job's lock held by `token`, as a live claim holds it."""
    await redis.hset(queue_keys(queue, prefix).lock, job_id, token)


async def stored_by_its_claim(mirror: RunMirror, record: RunRecord) -> None:
    """Store `record` while its claim holds the lock, then let the claim go, as a stall does:
    the state a re-pickup after that stall finds."""
    keys = queue_keys(record.queue, mirror.prefix)
    if not TOKEN.match(record.claim):  # an older release's record, or one written by hand
        await mirror.redis.hset(keys.runs, record.run_id, encode(record))
        return
    lock = keys.lock
    await hold(mirror.redis, mirror.prefix, record.queue, record.id, record.claim)
    assert await mirror.put(record.queue, record)
    await mirror.redis.hdel(lock, record.id)
