"""Scope gate: how many jobs may run at once on one folder, one repo and one project.

- A local job's scope is its folder's whole tree, as the folder gate resolved it (so two
  spellings are one scope): one job at a time in a folder, the folders inside it and the
  folders above it on this host (`fleet/folders.py`), and no scoped-limits row can lift that.
  A row for the folder with `concurrent` <= 0 closes it (every job defers); a bigger value is
  ignored. No fleet lease: a folder's jobs all go to one host's queue. A chained child
  (`parent_job_id`) that finds the folder busy defers `chained` rather than `scope-folder`.
- A forge job's scope is its repo (`owner/name`, lowercased). Its bound is the `concurrent` of
  the scoped-limits row for that repo (case-insensitive); no row, or no `concurrent`, means
  unbounded and no hold at all. A finite bound takes an in-process slot, then a fleet lease.
- Then the project's `concurrent`, the same way, for every kind of job.

A repo or project bound is taken by `hold.take` (any bound of 0 or less admits nothing), the
folder by the folder mutex (`slots.folders`); a busy defer names the holder, and the held
folder when it is another one, above or inside the job's. Details name a folder by its
basename only, as `Job.target` does.

The rows the gate reads (repo bounds, closed folders resolved) are worked out once per snapshot
(`Limits`), not per pickup: a pickup looks its repo or folder up.
"""

from __future__ import annotations

import os

from dispatch.config.schemas import Project, ScopedLimit
from dispatch.fleet.folders import FolderTicket, relation
from dispatch.fleet.leases import FleetLeases
from dispatch.fleet.slots import Slots
from dispatch.gates.base import ADMIT, SCOPE_DELAY_MS, Decision, Defer, PerSnapshot, Pickup
from dispatch.gates.hold import Bound, Busy, lease_name, take
from dispatch.reasons import CHAINED, SCOPE_FOLDER, SCOPE_PROJECT, SCOPE_REPO


class ScopeGate:
    name = "scope"

    def __init__(self, slots: Slots, leases: FleetLeases) -> None:
        self.slots = slots
        self.leases = leases
        self._limits: PerSnapshot[tuple[ScopedLimit, ...], Limits] = PerSnapshot(Limits, ())

    async def check(self, pickup: Pickup) -> Decision:
        job, folder = pickup.job, pickup.real_folder
        if folder:
            decision = await self._folder(pickup, folder)
        elif job.kind == "forge" and job.repo:
            decision = await self._repo(pickup, job.repo.lower())
        else:
            decision = None
        project = pickup.project
        if decision is None and project is not None and project.concurrent is not None:
            decision = await self._project(pickup, project, project.concurrent)
        return decision or ADMIT

    async def _folder(self, pickup: Pickup, path: str) -> Defer | None:
        closed = path in (await self._limits.of(pickup.config.limits)).closed
        label = f"folder {_name(path)}"
        if closed:
            busy, label_near = Busy(None, f"{label} admits no jobs (concurrent 0)"), label
        else:
            other = self._hold_folder(pickup, path)
            if other is None:
                return None
            near = _near(path, other.path)
            held = f"runs 1 of 1 on this host (held by {other.owner})"
            busy = Busy(other.owner, f"{label}{near[0]} {held}")
            label_near = f"{label}{near[1]}"
        parent = pickup.job.parent_job_id
        if parent is None:
            return Defer(SCOPE_DELAY_MS, SCOPE_FOLDER, busy.holder, busy.detail)
        return Defer(SCOPE_DELAY_MS, CHAINED, busy.holder, _chained(parent, label_near, busy))

    def _hold_folder(self, pickup: Pickup, path: str) -> FolderTicket | None:
        """Hold the folder's tree, else the held folder in the way (equal, above or inside it).
        Synchronous: no other pickup can take or give back a folder in between."""
        folders = self.slots.folders
        ticket = folders.try_acquire(path, owner=pickup.job.id)
        if ticket is None:
            return folders.in_the_way(path)

        def release() -> None:
            folders.release(ticket)

        pickup.hold(f"slot:folder:{path}", release)
        return None

    async def _repo(self, pickup: Pickup, repo: str) -> Defer | None:
        limit = (await self._limits.of(pickup.config.limits)).repos.get(repo)
        if limit is None:
            return None
        bound = Bound(f"repo:{repo}", limit, repo, lease_name("scope:repo", repo))
        return await self._defer(pickup, bound, SCOPE_REPO)

    async def _project(self, pickup: Pickup, project: Project, concurrent: int) -> Defer | None:
        label = f"project {project.id}"
        lease = lease_name("scope:project", project.id)
        bound = Bound(f"project:{project.id}", concurrent, label, lease)
        return await self._defer(pickup, bound, SCOPE_PROJECT)

    async def _defer(self, pickup: Pickup, bound: Bound, reason: str) -> Defer | None:
        busy = await take(pickup, self.slots, self.leases, bound)
        if busy is None:
            return None
        return Defer(SCOPE_DELAY_MS, reason, busy.holder, busy.detail)


class Limits:
    """What the gate reads of one snapshot's rows: each repo's bound (lowercased; the first row
    with a `concurrent` wins) and the folders closed by `concurrent` <= 0, resolved."""

    def __init__(self, rows: tuple[ScopedLimit, ...]) -> None:
        self.closed = {
            os.path.realpath(row.scope)
            for row in rows
            if row.concurrent is not None and row.concurrent <= 0 and os.path.isabs(row.scope)
        }
        self.repos: dict[str, int] = {}
        for row in rows:
            if row.concurrent is not None:
                self.repos.setdefault(row.scope.lower(), row.concurrent)


def _name(path: str) -> str:
    return os.path.basename(path) or "/"


def _near(path: str, held: str) -> tuple[str, str]:
    """How a busy detail, then a chained one, names a held folder other than the job's own."""
    how, name = relation(path, held), _name(held)
    if how == "above":
        return f" is inside folder {name}, which", f" (inside folder {name})"
    if how == "inside":
        return f" contains folder {name}, which", f" (around folder {name})"
    return "", ""


def _chained(parent: str, label: str, busy: Busy) -> str:
    if busy.holder is None:
        return f"waits for its parent's {label}: {busy.detail}"
    whose = "its parent" if busy.holder == parent else f"not its parent {parent}"
    return f"waits for its parent's {label}, held by job {busy.holder} ({whose})"
