"""What a daemon does before it claims anything.

A daemon that starts has no run of its own yet, so every run of this host (for Docker, every
container labelled with it) was left by a predecessor that died: the runner's `reap` stops and
removes each one (re-adopting a still-running container is not done: its claim has lapsed or
soon will, and the sweeper hands the job to whoever is free). Only once the runs are known to
be gone are this host's fleet lease holders released; if the runner could not tell (the engine
could not be listed), nothing is freed, because a slot must never be handed on while its
container may still run.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.errors import DispatchError
from dispatch.fleet.leases import known_leases, sweep_host
from dispatch.log import event
from dispatch.runners.base import Runner


async def boot(redis: Redis, runner: Runner, host: str, prefix: str) -> bool:
    """Reap, then free stale lease holders; False when the leases were left alone."""
    # Nothing is live yet: this process has claimed nothing, so no leftover run is owned.
    if not await runner.reap(host, lambda job, fence: False):
        event("boot_reap_skipped", reason="earlier runs could not be listed; stale leases kept")
        return False
    try:
        await sweep_host(redis, await known_leases(redis, prefix), host)
    except (DispatchError, RedisError, OSError) as exc:
        event("boot_lease_sweep_failed", error=str(exc))
        return False
    return True
