"""Egress gate: a job on dispatch's own network runs only behind the egress proxy.

While the guard reports a problem (network missing or not internal, firewall rules not in
place, proxy not listening), the job is held `egress-unavailable`, spending nothing. Else it
gets a grant for this attempt: its rules are egress.json's hosts plus the endpoints serving its
model (so it comes after the overlay gate, which resolves the model), narrowed by its own
`egress` list; the grant is revoked with the pickup's holds. Without a guard (another network
named, or the process runner) it admits: that network is the operator's to keep closed.
"""

from __future__ import annotations

from dispatch.config.schemas import ConfigSnapshot
from dispatch.egress.guard import EgressGuard
from dispatch.gates.base import ADMIT, EGRESS_DELAY_MS, Decision, Defer, Pickup
from dispatch.reasons import EGRESS_UNAVAILABLE


class EgressGate:
    name = "egress"  # not a reason: the gate's own name

    def __init__(self, guard: EgressGuard | None) -> None:
        self.guard = guard

    def inert(self, config: ConfigSnapshot) -> bool:
        return self.guard is None

    async def check(self, pickup: Pickup) -> Decision:
        guard = self.guard
        if guard is None:
            return ADMIT
        if guard.problem or not guard.proxy.serving:
            detail = guard.problem or "the proxy is not listening"
            return Defer(EGRESS_DELAY_MS, EGRESS_UNAVAILABLE, detail=detail)
        job = pickup.job
        grant = guard.grant(job.id, pickup.model, tuple(job.egress))
        pickup.hold("egress", lambda: guard.revoke(job.id, grant))
        return ADMIT
