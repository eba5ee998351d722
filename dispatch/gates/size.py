"""Size gate: decides the job's memory and CPUs (`pickup.size`), and whether it can ever fit here.

Each of memory and CPUs comes from the first source that has it: the project's row in
projects.json, then the job's own `size`, then settings.json's jobMemory / jobCpus, then
DISPATCH_JOB_MEMORY / DISPATCH_JOB_CPUS (4g, 2).
The project's row wins over the job because the operator owns it: a submitter cannot talk a
project's jobs past the size its operator chose. A row whose size does not parse is refused
`project-size-invalid`, never silently replaced by a default. Whatever the source, the size
must lie within the bounds of `dispatch.config.units` (memory 6m to 1t, CPUs 0.01 to 512); a
size from elsewhere outside them (a document that reached Redis without the submitter's checks,
settings built in code) is refused `job-size-invalid`: Docker reads 0 as "no limit".

A size larger than this host's job budget can never start here. On a queue only this host reads
(`jobs@<host>`, or `jobs` while at most one host is alive) that is refused
`job-size-exceeds-host`; on the shared queue with other hosts alive it is deferred
`size-never-fits`, since another host may fit it. The same holds for a project's `hostShare` of
the budget (`job-size-exceeds-share`), checked only when a host budget is configured, because
only then is the share enforced at all.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from dispatch.config.schemas import ConfigSnapshot, Overlay, Project
from dispatch.config.settings import Settings
from dispatch.config.units import check_cpus, check_memory, parse_memory
from dispatch.fleet.host_budget import Exceeded, HostBudget, JobSize, describe
from dispatch.gates.base import (
    ADMIT,
    NEVER_FITS_DELAY_MS,
    Decision,
    Defer,
    Pickup,
    Refuse,
)
from dispatch.model import Job, Size
from dispatch.reasons import (
    JOB_SIZE_EXCEEDS_HOST,
    JOB_SIZE_EXCEEDS_SHARE,
    JOB_SIZE_INVALID,
    PROJECT_SIZE_INVALID,
    SIZE_NEVER_FITS,
)

_T = TypeVar("_T")
# the refusal for what a size overruns: the host's budget or the project's share of it
_EXCEEDS: dict[Exceeded, str] = {"host": JOB_SIZE_EXCEEDS_HOST, "share": JOB_SIZE_EXCEEDS_SHARE}


class HostCount(Protocol):
    async def count(self) -> int: ...


class SizeInvalid(ValueError):
    """A size outside the grammar or its bounds, with the refusal that names its source."""

    def __init__(self, reason: str, sentence: str) -> None:
        super().__init__(sentence)
        self.reason = reason


def resolve_size(
    project: Project | None, job: Job, settings: Settings, overlay: Overlay | None = None
) -> JobSize:
    """Field by field: the project's row, the job's own size, settings.json, the env defaults.
    Raises SizeInvalid when the row, or whichever value is chosen, is not a valid size."""
    row_memory, row_cpus = _row(project)
    own = job.size or Size()
    tuned = overlay or Overlay()
    cpus = _first(row_cpus, own.cpus, tuned.job_cpus, settings.job_cpus)
    try:
        memory = row_memory
        if memory is None:
            text = _first(own.memory, tuned.job_memory, "")
            memory = parse_memory(text) if text else settings.job_memory
        return JobSize(memory=check_memory(memory), cpus=check_cpus(cpus))
    except ValueError as exc:
        raise SizeInvalid(JOB_SIZE_INVALID, f"the job's size: {exc}") from None


def _row(project: Project | None) -> tuple[int | None, float | None]:
    if project is None:
        return None, None
    try:
        memory = None if project.memory is None else parse_memory(project.memory)
        cpus = None if project.cpus is None else check_cpus(project.cpus)
    except ValueError as exc:
        raise SizeInvalid(PROJECT_SIZE_INVALID, f"project {project.id}'s {exc}") from None
    return memory, cpus


def _first(*values: _T | None) -> _T:
    return next(v for v in values if v is not None)


MEMO_MOST = 256  # sizes worked out per config snapshot, at most (then it starts afresh)
Worked = tuple[Project | None, JobSize, Exceeded | None]  # the row is kept: its id stays its own


class SizeGate:
    """Most pickups of one snapshot ask the same question (no project or the same one, no size
    of their own), so each answer is worked out once per snapshot and kept (`_memo`)."""

    name = "size"

    def __init__(self, settings: Settings, budget: HostBudget, live_hosts: HostCount) -> None:
        self.settings = settings
        self.budget = budget
        self.live_hosts = live_hosts
        self._memo_of: ConfigSnapshot | None = None
        # (the project row by identity, and the job's own size) -> the answer
        self._memo: dict[tuple[int, Size | None], Worked] = {}

    async def check(self, pickup: Pickup) -> Decision:
        try:
            _, size, misfit = self._worked(pickup)
        except SizeInvalid as exc:
            return Refuse(exc.reason, str(exc))
        pickup.size = size
        if misfit is None:
            return ADMIT
        project = pickup.project
        limit = self._limit(misfit, project)
        if await self._shared(pickup.claim.queue):
            detail = f"needs {describe(size)}, more than {limit}; waiting for a host that fits it"
            return Defer(NEVER_FITS_DELAY_MS, SIZE_NEVER_FITS, detail=detail)
        sentence = f"the job needs {describe(size)}, more than {limit}, so it can never start"
        return Refuse(_EXCEEDS[misfit], sentence)

    def _worked(self, pickup: Pickup) -> Worked:
        """The size and what it overruns even on an idle host; raises SizeInvalid (not kept)."""
        if self._memo_of is not pickup.config or len(self._memo) >= MEMO_MOST:
            self._memo_of, self._memo = pickup.config, {}
        project = pickup.project
        key = (id(project), pickup.job.size)
        worked = self._memo.get(key)
        if worked is None:
            size = resolve_size(project, pickup.job, self.settings, pickup.config.overlay)
            share = project.host_share if project and self.budget.configured else None
            worked = self._memo[key] = (project, size, self.budget.misfit(size, share))
        return worked

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
