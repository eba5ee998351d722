"""Fleet agreement: every daemon publishes its trigger fingerprint with its heartbeat
(`keys.host_alive`, field `triggers`), and mints only while every live peer that publishes one
publishes the same. Two hosts that read different triggers.json files (or time zone rules) thus
both stop minting, and say so, until they agree: two versions of one schedule never run side by
side. A peer without the field (a release before triggers) mints nothing and is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from redis.asyncio import Redis

from dispatch.queue import keys

FIELD = "triggers"


@dataclass(frozen=True)
class Agreement:
    mine: str
    peers: int = 0  # live peers publishing a fingerprint
    differing: dict[str, str] = field(default_factory=dict)  # host -> its fingerprint

    @property
    def agreed(self) -> bool:
        return not self.differing

    def words(self) -> str:
        if self.agreed:
            return f"agreed ({self.peers} live peer{'' if self.peers == 1 else 's'})"
        hosts = ", ".join(f"{h} ({fp})" for h, fp in sorted(self.differing.items()))
        return f"differs from {hosts}: no host mints until the triggers files agree"

    def as_json(self) -> dict[str, Any]:
        return {"fingerprint": self.mine, "agreed": self.agreed, "peers": self.peers} | {
            "differing": self.differing
        }


async def agreement(redis: Redis, prefix: str, host: str, mine: str) -> Agreement:
    """This host's fingerprint against every live peer's (one SMEMBERS, one pipelined read)."""
    published = await published_fingerprints(redis, prefix)
    peers = {h: fp for h, fp in published.items() if h != host}
    differing = {h: fp for h, fp in peers.items() if fp != mine}
    return Agreement(mine, len(peers), differing)


async def published_fingerprints(redis: Redis, prefix: str) -> dict[str, str]:
    """Live host -> the fingerprint its heartbeat carries."""
    hosts = sorted(_text(h) for h in await redis.smembers(keys.hosts_registry(prefix)))
    if not hosts:
        return {}
    async with redis.pipeline(transaction=False) as p:
        for h in hosts:
            p.get(keys.host_alive(h, prefix))
        beats = await p.execute()
    found = {}
    for h, raw in zip(hosts, beats, strict=True):
        fp = _fingerprint(raw)
        if fp is not None:
            found[h] = fp
    return found


def _fingerprint(raw: bytes | None) -> str | None:
    if not raw:
        return None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    fp = value.get(FIELD) if isinstance(value, dict) else None
    return fp if isinstance(fp, str) else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
