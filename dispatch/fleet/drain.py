"""Draining a host from anywhere: `dispatch drain HOST` (or `dispatch service restart --drain`).

The request is one key, `host_drain`, naming the start (`started_ms`, from the host's
heartbeat) of the daemon it is for, so that a daemon started after it, the upgraded one of a
rolling upgrade, never obeys it. The daemon reads it with its heartbeat; when it names its own
start, it stops claiming, says `draining` in its beats (`status`, `hosts`) and in systemd's
STOPPING, lets its running jobs finish within the request's grace (then hands them back, as a
shutdown does, spending no attempt) and exits 0, deleting the request. The key expires
`TTL_SLACK_S` after the grace, so a request for a daemon that never came back is not left
behind.
"""

from __future__ import annotations

import msgspec
from redis.asyncio import Redis

from dispatch.queue import keys

TTL_SLACK_S = 600.0


class DrainRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    started_ms: int  # the daemon it is for: its heartbeat's start
    grace_s: float  # how long its running jobs may take before they are handed back
    at: str = ""
    by: str = ""


def decode(raw: bytes | str | None) -> DrainRequest | None:
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=DrainRequest)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # not ours: it drains nothing


async def ask(redis: Redis, prefix: str, host: str, request: DrainRequest) -> None:
    ttl_ms = int((request.grace_s + TTL_SLACK_S) * 1000)
    await redis.set(keys.host_drain(host, prefix), msgspec.json.encode(request), px=ttl_ms)


async def done(redis: Redis, prefix: str, host: str) -> None:
    await redis.delete(keys.host_drain(host, prefix))
