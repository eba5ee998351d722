"""Host slot gate: with no host budget configured, at most this host's slots pass here at
once (settings.json's `concurrency`, as the pickup's config says, else DISPATCH_CONCURRENCY;
an in-process slot per job, held until the pickup ends); a full host defers `host-slot`. With
a budget configured it admits without a hold: the host-budget gate bounds the host by memory
and CPUs instead, so a fixed count would only second-guess it.
"""

from __future__ import annotations

from dispatch.config.schemas import ConfigSnapshot
from dispatch.config.settings import Settings
from dispatch.fleet.host_budget import HostBudget
from dispatch.fleet.slots import Slots
from dispatch.gates.base import ADMIT, HOST_SLOT_DELAY_MS, Decision, Defer, Pickup
from dispatch.gates.hold import slot_release
from dispatch.reasons import HOST_SLOT

HOST_SLOT_KEY = "host"


class HostSlotGate:
    name = "host-slot"  # not a reason: the gate's own name

    def __init__(self, settings: Settings, slots: Slots, budget: HostBudget) -> None:
        self.settings = settings
        self.slots = slots
        self.budget = budget

    def inert(self, config: ConfigSnapshot) -> bool:
        return self.budget.configured

    async def check(self, pickup: Pickup) -> Decision:
        if self.budget.configured:
            return ADMIT
        limit = pickup.config.overlay.slots_for(self.settings.host, self.settings.concurrency)
        ticket = self.slots.try_acquire(HOST_SLOT_KEY, limit, owner=pickup.claim.id)
        if ticket is None:
            busy = "the one host slot is busy" if limit == 1 else f"all {limit} host slots are busy"
            return Defer(HOST_SLOT_DELAY_MS, HOST_SLOT, detail=busy)
        pickup.hold(self.name, slot_release(self.slots, ticket))
        return ADMIT
