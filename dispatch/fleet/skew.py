"""This host's clock against the Redis server's, the one clock the whole fleet shares.

Hosts' clocks drift apart; the queue scripts already judge due times and lock deadlines by the
server's TIME. Each heartbeat (daemon/upkeep.py) sends a TIME in the same round trip as its SET
and keeps the offset: the server's instant less this host's at the round trip's midpoint, off
by at most half the round trip. The next beat publishes it (`offset_ms` in the alive key). The
trigger minter judges each round by this host's clock plus the offset (triggers/minter.py), so
a host whose clock runs ahead never takes occurrences not yet due for missed ones.

`dispatch doctor` and `dispatch triggers` name every live host whose published offset is past
SKEW_WARN_MS: 2 s is well past a loaded daemon's round trip error and well inside the minter's
one-minute downtime gap, and a host that far off still stamps its own records and `--after`
instants with its own clock.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from dispatch.queue.heartbeats import heartbeats

SKEW_WARN_MS = 2000
FIELD = "offset_ms"  # the heartbeat's field (dispatch.clock.ServerTime measures it)


async def published_offsets(redis: Redis, prefix: str) -> dict[str, int]:
    """Live host -> the offset its heartbeat carries (hosts that publish none are left out)."""
    return offsets_of(await heartbeats(redis, prefix))


def offsets_of(beats: dict[str, dict[str, Any]]) -> dict[str, int]:
    found = {}
    for host, beat in beats.items():
        offset = beat.get(FIELD)
        if isinstance(offset, int) and not isinstance(offset, bool):
            found[host] = offset
    return found


def skewed(offsets: dict[str, int], warn_ms: int = SKEW_WARN_MS) -> dict[str, int]:
    """The hosts whose offset to the server is past `warn_ms` either way."""
    return {host: ms for host, ms in sorted(offsets.items()) if abs(ms) > warn_ms}


def words(offsets: dict[str, int]) -> str:
    """`h2 60.0 s ahead of Redis, h3 3.1 s behind` (a host ahead has a negative offset)."""
    return ", ".join(
        f"{host} {abs(ms) / 1000:.1f} s {'ahead of' if ms < 0 else 'behind'} Redis"
        for host, ms in sorted(offsets.items())
    )
