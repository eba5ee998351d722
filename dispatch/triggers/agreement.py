"""Fleet agreement: every daemon publishes its trigger fingerprint with its heartbeat
(`keys.host_alive`, field `triggers`), and mints only while every live peer that publishes one
publishes the same. Two hosts that read different triggers.json files (or time zone rules) thus
both stop minting, and say so, until they agree: two versions of one schedule never run side by
side. A peer without the field (a release before triggers) mints nothing and is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from dispatch.queue.heartbeats import heartbeats

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
    found = {}
    for host, beat in (await heartbeats(redis, prefix)).items():
        fp = beat.get(FIELD)
        if isinstance(fp, str):
            found[host] = fp
    return found
