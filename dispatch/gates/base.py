"""What a gate answers, and the holds it leaves behind.

A gate is a small object with one async method, `check(pickup) -> Decision`, and maybe a sync
`inert(config) -> bool`: True when it admits every pickup under that config. It never raises
to say no and never reads the wall clock itself. A gate that takes a hold (a slot, a lease)
pushes how to give it back onto `pickup.holds`; the processor gives every hold back
(`Pickup.release`, in reverse order) on every exit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, Protocol, TypeVar

import anyio
import msgspec

from dispatch.config.schemas import ConfigSnapshot, Project
from dispatch.fleet.host_budget import JobSize
from dispatch.fleet.leases import Lease
from dispatch.log import event
from dispatch.model import Job, RunRecord
from dispatch.queue.transitions import Claim
from dispatch.reasons import (
    EGRESS_UNAVAILABLE,
    ENDPOINT,
    ENGINE_UNAVAILABLE,
    HOST_BUDGET,
    HOST_SLOT,
    NEWER_RELEASE,
    REDIS_UNAVAILABLE,
    SCOPE_FOLDER,
    SIZE_NEVER_FITS,
    WAIT_SUPERSEDE,
    WAIT_THROTTLED,
    delay_ms,
    max_delay_ms,
)
from dispatch.runners.base import AbortSignal
from dispatch.spend.ledger import Reservation

# Re-check delays, each declared with its reason in dispatch/reasons.py (distinct per gate, so a
# waiting job's reason can be told from its due time), under the names the gates use.
SCOPE_DELAY_MS: Final = delay_ms(SCOPE_FOLDER)  # every reason of the scope gate
ENDPOINT_DELAY_MS: Final = delay_ms(ENDPOINT)
HOST_SLOT_DELAY_MS: Final = delay_ms(HOST_SLOT)
HOST_BUDGET_DELAY_MS: Final = delay_ms(HOST_BUDGET)
NEVER_FITS_DELAY_MS: Final = delay_ms(SIZE_NEVER_FITS)
NEWER_RELEASE_DELAY_MS: Final = delay_ms(NEWER_RELEASE)
WAIT_THROTTLE_DELAY_MS: Final = delay_ms(WAIT_THROTTLED)  # its floor, and wait-aborted's delay
WAIT_SUPERSEDE_DELAY_MS: Final = delay_ms(WAIT_SUPERSEDE)
EGRESS_DELAY_MS: Final = delay_ms(EGRESS_UNAVAILABLE)
ENGINE_DELAY_MS: Final = delay_ms(ENGINE_UNAVAILABLE)  # the first; it backs off (engine_wait.py)
REDIS_FAULT_DELAY_MS: Final = delay_ms(REDIS_UNAVAILABLE)  # doubling while pickups meet faults
REDIS_FAULT_MAX_DELAY_MS: Final = max_delay_ms(REDIS_UNAVAILABLE)


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
    read: the folder (folder gate), the project (project gate), the size (size gate), the
    model (overlay gate)."""

    claim: Claim
    job: Job
    signal: AbortSignal = msgspec.field(default_factory=AbortSignal)
    config: ConfigSnapshot = msgspec.field(default_factory=ConfigSnapshot)
    folder: str | None = None  # a local job's folder, resolved once (gates/folder.py)
    project: Project | None = None
    size: JobSize | None = None
    model: str | None = None
    holds: list[tuple[str, Release]] = msgspec.field(default_factory=list)
    leases: list[Lease] = msgspec.field(default_factory=list)  # the fleet leases among the holds
    spend: Reservation | None = None  # the spend-cap gate's, settled after the run

    @property
    def real_folder(self) -> str | None:
        """The folder every gate and the runner use: the resolved one, else (no folder gate
        ran: a test of one gate) the job's own spelling."""
        if self.job.kind != "local":
            return None
        return self.folder or self.job.folder

    def degraded(self) -> tuple[str, ...]:
        """The fleet leases this pickup was granted without Redis's answer (failed open): its
        start was not checked against the fleet bound, even if the lease was taken since."""
        if not self.leases:
            return ()
        return tuple(lease.name for lease in self.leases if lease.failed_open)

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


Rows = TypeVar("Rows")
Worked = TypeVar("Worked")


class PerSnapshot(Generic[Rows, Worked]):
    """What a gate works out from a snapshot's rows (an index, folders resolved), once per
    snapshot: a new file is a new tuple, so the rows are told apart by identity. It is worked
    out off the event loop (resolving a folder may meet a slow mount), and the pickups that
    arrive meanwhile wait for that one result rather than each working it out again."""

    def __init__(self, work: Callable[[Rows], Worked], rows: Rows) -> None:
        self._work = work
        self._rows, self._worked = rows, work(rows)
        self._lock = asyncio.Lock()

    async def of(self, rows: Rows) -> Worked:
        if rows is not self._rows:
            async with self._lock:
                if rows is not self._rows:
                    worked = await anyio.to_thread.run_sync(self._work, rows)
                    self._rows, self._worked = rows, worked
        return self._worked
