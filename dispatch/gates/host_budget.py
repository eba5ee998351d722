"""Host budget gate: the memory and CPUs of this host's running jobs plus this one stay within
the host's job budget, and a project's within its `hostShare` of it; else defer `host-budget`.

The budget is DISPATCH_HOST_MEMORY / DISPATCH_HOST_CPUS (`configured`); when only one is set the
other is the machine's figure. With neither set the gate admits without a hold (the host-slot
gate's fixed concurrency bounds the host instead) and `HostBudget`'s totals are the machine's,
which the size gate still uses to refuse a job no container here could ever get.

Reservations live in this process and are taken synchronously, so a check-and-take is atomic in
one event loop. CPUs are counted in nano-CPUs (Docker's unit): sums are exact integers, so
releasing everything brings `used()` back to exactly zero.
"""

from __future__ import annotations

from dispatch.config.schemas import ConfigSnapshot, Project
from dispatch.fleet.host_budget import HostBudget, JobSize, describe
from dispatch.gates.base import ADMIT, HOST_BUDGET_DELAY_MS, Decision, Defer, Pickup
from dispatch.reasons import HOST_BUDGET


class HostBudgetGate:
    name = "host-budget"  # not a reason: the gate's own name

    def __init__(self, budget: HostBudget) -> None:
        self.budget = budget

    def inert(self, config: ConfigSnapshot) -> bool:
        return not self.budget.configured

    async def check(self, pickup: Pickup) -> Decision:
        if not self.budget.configured:
            return ADMIT
        if pickup.size is None:
            raise RuntimeError("the host-budget gate needs the size gate before it")
        project = pickup.project
        project_id = project.id if project else None
        share = project.host_share if project else None
        reservation = self.budget.try_reserve(pickup.claim.id, pickup.size, project_id, share)
        if reservation is None:
            detail = self._detail(pickup.size, project)
            return Defer(HOST_BUDGET_DELAY_MS, HOST_BUDGET, detail=detail)
        budget = self.budget

        def give_back() -> None:
            budget.release(reservation)

        pickup.hold(self.name, give_back)
        return ADMIT

    def _detail(self, size: JobSize, project: Project | None) -> str:
        budget, needs = self.budget, f"needs {describe(size)}, but"
        share = project.host_share if project else None
        if project and share is not None and budget.bound(size, project.id, share) == "share":
            used, limit = budget.project_used(project.id), budget.share_of(share)
            return (
                f"{needs} project {project.id}'s running jobs use {describe(used)} of its "
                f"{share:.0%} share of this host ({describe(limit)})"
            )
        return (
            f"{needs} running jobs use {describe(budget.used())} of this host's job budget "
            f"of {describe(budget.total)}"
        )
