"""What a gate answers, and the holds it leaves behind.

A gate is a small object with one async method, `check(pickup) -> Decision`, and maybe a sync
`inert(config) -> bool`: True when it admits every pickup under that config. It never raises
to say no and never reads the wall clock itself. A gate that takes a hold (a slot, a lease)
pushes how to give it back onto `pickup.holds`; the processor gives every hold back
(`Pickup.release`, in reverse order) on every exit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from dispatch.config.schemas import ConfigSnapshot, Project
from dispatch.fleet.host_budget import JobSize
from dispatch.fleet.leases import Lease
from dispatch.log import event
from dispatch.model import Job, RunRecord
from dispatch.queue.transitions import Claim
from dispatch.runners.base import AbortSignal
from dispatch.spend.ledger import Reservation

# Re-check delays, distinct per reason so a waiting job's reason can be told from its due time.
SCOPE_DELAY_MS = 5_000
ENDPOINT_DELAY_MS = 7_000
HOST_SLOT_DELAY_MS = 3_000
HOST_BUDGET_DELAY_MS = 30_000
NEVER_FITS_DELAY_MS = 60_000
NEWER_RELEASE_DELAY_MS = 10 * 60_000
WAIT_THROTTLE_DELAY_MS = 11_000  # the floor of a wait-throttled (and wait-aborted) re-check
WAIT_SUPERSEDE_DELAY_MS = 15_000  # a sibling's liveness could not be read: ask again
EGRESS_DELAY_MS = 4_000  # the egress guard looks again every 5 s
ENGINE_DELAY_MS = 2_000  # the first re-check of a job held engine-unavailable (it backs off)
# A Redis fault in a gate: 2 s, doubling with each faulted pickup in a row, at most 16 s (none of
# 2, 4, 8, 16 is another reason's delay). Short: Redis is usually back within seconds.
REDIS_FAULT_DELAY_MS = 2_000
REDIS_FAULT_MAX_DELAY_MS = 16_000


def redis_fault_delay_ms(in_a_row: int) -> int:
    """The re-check delay after the `in_a_row`-th pickup in a row that met a Redis fault."""
    doublings = min(max(in_a_row - 1, 0), 8)  # bounded, so the shift stays small
    return min(REDIS_FAULT_DELAY_MS << doublings, REDIS_FAULT_MAX_DELAY_MS)


class Admit(msgspec.Struct, frozen=True, tag="admit"):
    pass


class Defer(msgspec.Struct, frozen=True, tag="defer"):
    delay_ms: int
    reason: str
    holder: str | None = None
    detail: str = ""


class Refuse(msgspec.Struct, frozen=True, tag="refuse"):
    reason: str
    sentence: str


class Settled(msgspec.Struct, frozen=True, tag="settled"):
    """This attempt already ran to the end: finish with its recorded outcome."""

    record: RunRecord


Decision = Admit | Defer | Refuse | Settled
ADMIT = Admit()

Release = Callable[[], Awaitable[Any] | None]


class Pickup(msgspec.Struct):
    """One claimed job on its way through the gates. Earlier gates fill in what later ones
    read: the project (project gate), the size (size gate), the model (overlay gate)."""

    claim: Claim
    job: Job
    signal: AbortSignal = msgspec.field(default_factory=AbortSignal)
    config: ConfigSnapshot = msgspec.field(default_factory=ConfigSnapshot)
    project: Project | None = None
    size: JobSize | None = None
    model: str | None = None
    holds: list[tuple[str, Release]] = msgspec.field(default_factory=list)
    leases: list[Lease] = msgspec.field(default_factory=list)  # the fleet leases among the holds
    spend: Reservation | None = None  # the spend-cap gate's, settled after the run

    def degraded(self) -> tuple[str, ...]:
        """The fleet leases this pickup holds that Redis never confirmed (failed open)."""
        if not self.leases:
            return ()
        return tuple(lease.name for lease in self.leases if lease.degraded)

    def hold(self, name: str, release: Release) -> None:
        self.holds.append((name, release))

    async def release(self) -> None:
        """Give every hold back, the last taken first."""
        while self.holds:
            name, release = self.holds.pop()
            try:
                result = release()
                if result is not None:  # an awaitable (a sync release returns None)
                    await result
            except Exception as exc:  # one failed release must not keep the others
                event("hold_release_failed", job=self.claim.id, hold=name, error=str(exc))


class Gate(Protocol):
    name: str

    async def check(self, pickup: Pickup) -> Decision: ...


def active(gates: list[Gate], config: ConfigSnapshot) -> list[Gate]:
    """The gates with something to check under `config`: a gate may say, with `inert`, that
    it admits every pickup under a config (no pause windows, no spend caps), so the pickups
    of one snapshot skip it without a call each."""
    return [g for g in gates if not getattr(g, "inert", _never)(config)]


def _never(config: ConfigSnapshot) -> bool:
    return False
