"""Settled-record gate: a job picked up again after its lock lapsed (a stall) may have run to
the end on a daemon that died before ending the claim. If the fleet mirror holds a run record
for this very attempt, the job ends with that outcome rather than running twice."""

from __future__ import annotations

from dispatch.gates.base import ADMIT, Decision, Pickup, Settled
from dispatch.log import event
from dispatch.records.mirror import RunMirror


class SettledGate:
    name = "settled"

    def __init__(self, mirror: RunMirror) -> None:
        self.mirror = mirror

    async def check(self, pickup: Pickup) -> Decision:
        claim = pickup.claim
        if claim.stalls == 0:  # first pickup of this attempt: nothing can have run yet
            return ADMIT
        record = await self.mirror.get(claim.queue, f"{claim.id}#{claim.attempt}")
        if record is None:
            return ADMIT
        event("job_settled", job=claim.id, attempt=claim.attempt, outcome=record.outcome)
        return Settled(record)
