"""Size gate: decides the job's memory and CPUs (`pickup.size`), and whether it can ever fit here.

Each of memory and CPUs comes from the first source that has it: the project's row in
projects.json, then the job's own `size`, then settings.json's jobMemory / jobCpus, then
DISPATCH_JOB_MEMORY / DISPATCH_JOB_CPUS (4g, 2).
The project's row wins over the job because the operator owns it: a submitter cannot talk a
project's jobs past the size its operator chose. A row whose size does not parse is refused
`project-size-invalid`, never silently replaced by a default.

A size larger than this host's job budget can never start here. On a queue only this host reads
(`jobs@<host>`, or `jobs` while at most one host is alive) that is refused
`job-size-exceeds-host`; on the shared queue with other hosts alive it is deferred
`size-never-fits`, since another host may fit it. The same holds for a project's `hostShare` of
the budget (`job-size-exceeds-share`), checked only when a host budget is configured, because
only then is the share enforced at all.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from dispatch.config.schemas import Overlay, Project
from dispatch.config.settings import Settings, parse_memory
from dispatch.gates.base import (
    ADMIT,
    NEVER_FITS_DELAY_MS,
    Decision,
    Defer,
    JobSize,
    Pickup,
    Refuse,
)
from dispatch.gates.host_budget import Exceeded, HostBudget, describe
from dispatch.model import Job
from dispatch.reasons import (
    JOB_SIZE_EXCEEDS_HOST,
    JOB_SIZE_EXCEEDS_SHARE,
    PROJECT_SIZE_INVALID,
    SIZE_NEVER_FITS,
)

_T = TypeVar("_T")
# the refusal for what a size overruns: the host's budget or the project's share of it
_EXCEEDS: dict[Exceeded, str] = {"host": JOB_SIZE_EXCEEDS_HOST, "share": JOB_SIZE_EXCEEDS_SHARE}


class HostCount(Protocol):
    async def count(self) -> int: ...


def resolve_size(
    project: Project | None, job: Job, settings: Settings, overlay: Overlay | None = None
) -> JobSize:
    """Field by field: the project's row, the job's own size, settings.json, the env defaults.
    Raises ValueError naming the project when its row's size is not valid."""
    row_memory, row_cpus = _row(project)
    own = job.size
    own_memory = parse_memory(own.memory) if own and own.memory else None
    own_cpus = own.cpus if own else None
    tuned = overlay or Overlay()
    tuned_memory = parse_memory(tuned.job_memory) if tuned.job_memory else None
    return JobSize(
        memory=_first(row_memory, own_memory, tuned_memory, settings.job_memory),
        cpus=_first(row_cpus, own_cpus, tuned.job_cpus, settings.job_cpus),
    )


def _row(project: Project | None) -> tuple[int | None, float | None]:
    if project is None:
        return None, None
    if project.cpus is not None and project.cpus <= 0:
        raise ValueError(f"project {project.id}'s cpus {project.cpus!r} is not above 0")
    return _row_memory(project), project.cpus


def _row_memory(project: Project) -> int | None:
    if project.memory is None:
        return None
    problem = ValueError(f"project {project.id}'s memory {project.memory!r} is not like 4g")
    try:
        memory = parse_memory(project.memory)
    except ValueError:
        raise problem from None
    if memory <= 0:
        raise problem
    return memory


def _first(*values: _T | None) -> _T:
    return next(v for v in values if v is not None)


class SizeGate:
    name = "size"

    def __init__(self, settings: Settings, budget: HostBudget, live_hosts: HostCount) -> None:
        self.settings = settings
        self.budget = budget
        self.live_hosts = live_hosts

    async def check(self, pickup: Pickup) -> Decision:
        try:
            size = resolve_size(pickup.project, pickup.job, self.settings, pickup.config.overlay)
        except ValueError as exc:
            return Refuse(PROJECT_SIZE_INVALID, str(exc))
        pickup.size = size
        project = pickup.project
        share = project.host_share if project and self.budget.configured else None
        misfit = self.budget.misfit(size, share)
        if misfit is None:
            return ADMIT
        limit = self._limit(misfit, project)
        if await self._shared(pickup.claim.queue):
            detail = f"needs {describe(size)}, more than {limit}; waiting for a host that fits it"
            return Defer(NEVER_FITS_DELAY_MS, SIZE_NEVER_FITS, detail=detail)
        sentence = f"the job needs {describe(size)}, more than {limit}, so it can never start"
        return Refuse(_EXCEEDS[misfit], sentence)

    async def _shared(self, queue: str) -> bool:
        """Whether another live host reads this queue and so might fit the job."""
        return "@" not in queue and await self.live_hosts.count() > 1

    def _limit(self, misfit: Exceeded, project: Project | None) -> str:
        if misfit == "host" or project is None or project.host_share is None:
            return f"this host's job budget of {describe(self.budget.total)}"
        share = project.host_share
        return (
            f"project {project.id}'s {share:.0%} share of this host's job budget "
            f"({describe(self.budget.share_of(share))})"
        )
