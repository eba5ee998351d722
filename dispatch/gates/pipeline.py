"""The admission gates in the order a pickup passes them (docs/operating/waiting.md).

The dirty-tree check comes after the scope gate holds the folder: only then does a dirty
tree mean the operator's own edits rather than a job of ours still at work in it (which would
have been deferred `scope-folder` instead). The secret-profile and job-user gates come before
any gate that takes a hold: a job naming an unknown secret profile, or whose folder is owned by
root, is refused without a slot or a lease taken first. The spend caps come last of all, right
before the run: nothing is reserved for a job an earlier gate would defer or refuse.
The trigger-overlap gate comes right after the settled one: a skipped occurrence takes no hold.
The folder gate resolves a local job's folder before the first gate that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatch.clock import Clock
from dispatch.config.settings import Settings
from dispatch.egress.guard import EgressGuard
from dispatch.fleet.host_budget import HostBudget
from dispatch.fleet.hosts import DeclaredProfiles, LiveHosts
from dispatch.fleet.leases import FleetLeases
from dispatch.fleet.slots import Slots
from dispatch.gates.base import Gate
from dispatch.gates.dirty.gate import DirtyTreeGate
from dispatch.gates.egress import EgressGate
from dispatch.gates.endpoints import EndpointGate
from dispatch.gates.folder import FolderGate
from dispatch.gates.head import HeadGate
from dispatch.gates.host_budget import HostBudgetGate
from dispatch.gates.host_slot import HostSlotGate
from dispatch.gates.job_user import JobUserGate, RootOwned
from dispatch.gates.overlay import OverlayGate
from dispatch.gates.pause import PauseGate
from dispatch.gates.project import ProjectGate
from dispatch.gates.scope import ScopeGate
from dispatch.gates.secret_profiles import SecretProfileGate
from dispatch.gates.settled import SettledGate
from dispatch.gates.size import SizeGate
from dispatch.gates.spend import SpendGate
from dispatch.gates.trigger_overlap import TriggerOverlapGate
from dispatch.gates.wait.gate import WaitGate
from dispatch.gates.wait.parts import WaitParts
from dispatch.records.mirror import RunMirror
from dispatch.spend.ledger import SpendLedger


@dataclass(frozen=True)
class GateDeps:
    """What the gates share: ONE set of in-process slots and one budget for all queues."""

    settings: Settings
    slots: Slots
    leases: FleetLeases
    budget: HostBudget
    live_hosts: LiveHosts
    mirror: RunMirror
    clock: Clock
    waits: WaitParts
    root_owned: RootOwned | None = None  # the docker runner's job-user rule (assembly's)
    spend: SpendLedger | None = None  # None: no spend caps (tests of the other gates)
    egress: EgressGuard | None = None  # only when jobs run on dispatch's own network
    profiles: DeclaredProfiles | None = None  # other hosts' secret profiles (their heartbeats)


def pipeline(d: GateDeps) -> list[Gate]:
    return [
        HeadGate(),
        SettledGate(d.mirror),
        TriggerOverlapGate(d.mirror.redis, d.settings.prefix),
        FolderGate(d.settings.allowed_roots),
        ProjectGate(),
        PauseGate(d.clock),
        SecretProfileGate(d.profiles, d.clock),
        JobUserGate(d.root_owned),
        SizeGate(d.settings, d.budget, d.live_hosts),
        WaitGate(d.settings, d.slots, d.leases, d.waits, d.clock),
        HostSlotGate(d.settings, d.slots, d.budget),
        ScopeGate(d.slots, d.leases),
        OverlayGate(),
        EgressGate(d.egress),
        EndpointGate(d.slots, d.leases),
        HostBudgetGate(d.budget),
        DirtyTreeGate(roots=d.settings.allowed_roots),
        *([SpendGate(d.spend, d.clock)] if d.spend is not None else []),
    ]
