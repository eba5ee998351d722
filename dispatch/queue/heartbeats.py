"""The fleet's heartbeats, read: each live host's alive key (`keys.host_alive`), a JSON object
its daemon refreshes every few seconds (dispatch/daemon/upkeep.py writes it). Readers take the
field they need: the trigger fingerprint (triggers/agreement.py), the clock offset
(fleet/skew.py)."""

from __future__ import annotations

from typing import Any

import msgspec
from redis.asyncio import Redis

from dispatch.queue import keys


async def heartbeats(
    redis: Redis, prefix: str, hosts: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Live host -> its heartbeat, of `hosts` or of every host registered (one SMEMBERS
    more); one pipelined read. A beat that is not a JSON object is left out, as is a host
    whose key expired (it is not alive)."""
    if hosts is None:
        hosts = sorted(_text(h) for h in await redis.smembers(keys.hosts_registry(prefix)))
    if not hosts:
        return {}
    async with redis.pipeline(transaction=False) as p:
        for h in hosts:
            p.get(keys.host_alive(h, prefix))
        beats = await p.execute()
    found = {}
    for h, raw in zip(hosts, beats, strict=True):
        beat = decode(raw)
        if beat is not None:
            found[h] = beat
    return found


def decode(raw: bytes | None) -> dict[str, Any] | None:
    """One alive key's heartbeat; None when there is none, or it is not a JSON object."""
    try:
        value = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
