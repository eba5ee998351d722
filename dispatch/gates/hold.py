"""Taking a concurrency bound for a pickup: an in-process slot, then (unless the bound is per
machine) a fleet lease, each pushed onto the pickup's holds as it is taken. The scope and
endpoint gates both bound jobs this way.

Any bound of 0 or less admits nothing. Busy answers name a holder: a job id for an in-process
slot, a host for a fleet lease (holder ids are `<host>:<random>`, and the host is what an
operator can look at). A lease found full is logged `lease_full_deferred`, a grant made without
Redis's answer `lease_granted_degraded`: the metrics count both per lease.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
from redis.exceptions import RedisError

from dispatch.errors import ScriptError
from dispatch.fleet.leases import FleetLeases, Lease, holder_host, holders
from dispatch.fleet.slots import Slots, Ticket
from dispatch.gates.base import Pickup
from dispatch.log import event
from dispatch.queue.keys import lease_keys
from dispatch.reasons import LEASE_LOST


@dataclass(frozen=True, slots=True)
class Bound:
    """One concurrency bound: an in-process slot key, and a fleet lease unless per machine."""

    key: str
    limit: int
    label: str  # how a defer's detail names it
    lease: str | None = None


@dataclass(frozen=True, slots=True)
class Busy:
    holder: str | None
    detail: str


def lease_name(kind: str, name: str) -> str:
    """A lease name for `kind:name`; braces are escaped since they would break the hash tag."""
    escaped = name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return f"{kind}:{escaped}"


async def take(pickup: Pickup, slots: Slots, leases: FleetLeases, bound: Bound) -> Busy | None:
    """Take the bound's slot, then its lease; None when both are held, else who is in the way."""
    if bound.limit <= 0:
        return Busy(None, f"{bound.label} admits no jobs (concurrent {bound.limit})")
    ticket = slots.try_acquire(bound.key, bound.limit, owner=pickup.job.id)
    if ticket is None:
        return _busy(bound, slots.owners(bound.key), "on this host")
    pickup.hold(f"slot:{bound.key}", slot_release(slots, ticket))
    if bound.lease is None:
        return None
    lease = await leases.acquire(bound.lease, bound.limit, on_lost=_abort_on_loss(pickup))
    if lease is None:  # every slot is held elsewhere: the job waits
        event("lease_full_deferred", job=pickup.job.id, lease=bound.lease, slots=bound.limit)
        return _busy(bound, await _fleet_hosts(leases, bound.lease), "fleet-wide")
    pickup.hold(f"lease:{bound.lease}", lambda: leases.release(lease))
    pickup.leases.append(lease)
    if lease.degraded:  # the fleet-wide bound is not enforced for this job: say so once
        event("lease_granted_degraded", job=pickup.job.id, lease=bound.lease)
    return None


def slot_release(slots: Slots, ticket: Ticket) -> Callable[[], None]:
    """How a pickup gives an in-process slot back."""

    def release() -> None:
        slots.release(ticket)

    return release


def _busy(bound: Bound, held_by: list[str], where: str) -> Busy:
    who = ", ".join(held_by) or "unknown"
    detail = f"{bound.label} runs {len(held_by)} of {bound.limit} {where} (held by {who})"
    return Busy(held_by[0] if held_by else None, detail)


def _abort_on_loss(pickup: Pickup) -> Callable[[Lease], None]:
    def lost(_lease: Lease) -> None:
        pickup.signal.abort(LEASE_LOST)

    return lost


async def _fleet_hosts(leases: FleetLeases, name: str) -> list[str]:
    """Hosts holding the lease, for the defer's detail; empty if Redis cannot say."""
    try:
        with anyio.fail_after(leases.settings.timeout_s):  # the bound every lease call has
            held = await holders(leases.redis, lease_keys(name, leases.settings.prefix))
    except (RedisError, OSError, ScriptError, TimeoutError):
        return []
    return sorted(holder_host(h) for h in held)
