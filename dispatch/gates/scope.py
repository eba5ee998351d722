"""Scope gate: how many jobs may run at once on one folder, one repo and one project.

- A local job's scope is its folder (realpath, so two spellings are one scope): one job at a
  time on this host, and no scoped-limits row can lift that. A row for the folder with
  `concurrent` <= 0 closes it (every job defers); a bigger value is ignored. No fleet lease: a
  folder's jobs all go to one host's queue. A chained child (`parent_job_id`) that finds the
  folder busy defers `chained` rather than `scope-folder`.
- A forge job's scope is its repo (`owner/name`, lowercased). Its bound is the `concurrent` of
  the scoped-limits row for that repo (case-insensitive); no row, or no `concurrent`, means
  unbounded and no hold at all. A finite bound takes an in-process slot, then a fleet lease.
- Then the project's `concurrent`, the same way, for every kind of job.

Any bound of 0 or less admits nothing. Busy defers name a holder: a job id for an in-process
slot, a host for a fleet lease (holder ids are `<host>:<random>`, and the host is what an
operator can look at). Details name a folder by its basename only, as `Job.target` does.

`Bound` and `take` are shared with the endpoint gate: an in-process slot, then (unless the
bound is per machine) a fleet lease, each pushed onto the pickup's holds as it is taken.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from redis.exceptions import RedisError

from dispatch.configfiles import ScopedLimit
from dispatch.errors import ScriptError
from dispatch.gates.base import ADMIT, SCOPE_DELAY_MS, Decision, Defer, Pickup
from dispatch.keys import lease_keys
from dispatch.lease import FleetLeases, Lease, holder_host, holders
from dispatch.slots import Slots, Ticket


@dataclass(frozen=True, slots=True)
class Bound:
    """One concurrency bound: an in-process slot key, and a fleet lease unless per machine."""

    key: str
    limit: int
    label: str  # how a defer's detail names it
    lease: str | None = None


@dataclass(frozen=True, slots=True)
class Busy:
    holder: str | None
    detail: str


def lease_name(kind: str, name: str) -> str:
    """A lease name for `kind:name`; braces are escaped since they would break the hash tag."""
    escaped = name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return f"{kind}:{escaped}"


async def take(pickup: Pickup, slots: Slots, leases: FleetLeases, bound: Bound) -> Busy | None:
    """Take the bound's slot, then its lease; None when both are held, else who is in the way."""
    if bound.limit <= 0:
        return Busy(None, f"{bound.label} admits no jobs (concurrent {bound.limit})")
    ticket = slots.try_acquire(bound.key, bound.limit, owner=pickup.job.id)
    if ticket is None:
        return _busy(bound, slots.owners(bound.key), "on this host")
    pickup.hold(f"slot:{bound.key}", _slot_release(slots, ticket))
    if bound.lease is None:
        return None
    lease = await leases.acquire(bound.lease, bound.limit, on_lost=_abort_on_loss(pickup))
    if lease is None:
        return _busy(bound, await _fleet_hosts(leases, bound.lease), "fleet-wide")
    pickup.hold(f"lease:{bound.lease}", lambda: leases.release(lease))
    return None


def _busy(bound: Bound, held_by: list[str], where: str) -> Busy:
    who = ", ".join(held_by) or "unknown"
    detail = f"{bound.label} runs {len(held_by)} of {bound.limit} {where} (held by {who})"
    return Busy(held_by[0] if held_by else None, detail)


def _slot_release(slots: Slots, ticket: Ticket) -> Callable[[], None]:
    def release() -> None:
        slots.release(ticket)

    return release


def _abort_on_loss(pickup: Pickup) -> Callable[[Lease], None]:
    def lost(_lease: Lease) -> None:
        pickup.signal.abort("lease-lost")

    return lost


async def _fleet_hosts(leases: FleetLeases, name: str) -> list[str]:
    """Hosts holding the lease, for the defer's detail; empty if Redis cannot say."""
    try:
        held = await holders(leases.redis, lease_keys(name, leases.settings.prefix))
    except (RedisError, OSError, ScriptError):
        return []
    return sorted(holder_host(h) for h in held)


class ScopeGate:
    name = "scope"

    def __init__(self, slots: Slots, leases: FleetLeases) -> None:
        self.slots = slots
        self.leases = leases

    async def check(self, pickup: Pickup) -> Decision:
        job = pickup.job
        if job.kind == "local" and job.folder:
            decision = await self._folder(pickup, job.folder)
        elif job.kind == "forge" and job.repo:
            decision = await self._repo(pickup, job.repo.lower())
        else:
            decision = None
        return decision or await self._project(pickup) or ADMIT

    async def _folder(self, pickup: Pickup, folder: str) -> Defer | None:
        # realpath touches the filesystem (maybe a slow mount), so not on the event loop
        path, closed = await anyio.to_thread.run_sync(_resolve, folder, pickup.config.limits)
        label = f"folder {os.path.basename(path) or '/'}"
        bound = Bound(f"folder:{path}", 0 if closed else 1, label)
        busy = await take(pickup, self.slots, self.leases, bound)
        if busy is None:
            return None
        parent = pickup.job.parent_job_id
        if parent is None:
            return Defer(SCOPE_DELAY_MS, "scope-folder", busy.holder, busy.detail)
        return Defer(SCOPE_DELAY_MS, "chained", busy.holder, _chained(parent, label, busy))

    async def _repo(self, pickup: Pickup, repo: str) -> Defer | None:
        limit = _repo_limit(repo, pickup.config.limits)
        if limit is None:
            return None
        bound = Bound(f"repo:{repo}", limit, repo, lease_name("scope:repo", repo))
        return await self._defer(pickup, bound, "scope-repo")

    async def _project(self, pickup: Pickup) -> Defer | None:
        project = pickup.project
        if project is None or project.concurrent is None:
            return None
        label = f"project {project.id}"
        lease = lease_name("scope:project", project.id)
        bound = Bound(f"project:{project.id}", project.concurrent, label, lease)
        return await self._defer(pickup, bound, "scope-project")

    async def _defer(self, pickup: Pickup, bound: Bound, reason: str) -> Defer | None:
        busy = await take(pickup, self.slots, self.leases, bound)
        if busy is None:
            return None
        return Defer(SCOPE_DELAY_MS, reason, busy.holder, busy.detail)


def _resolve(folder: str, limits: tuple[ScopedLimit, ...]) -> tuple[str, bool]:
    """The folder's realpath, and whether a scoped-limits row closes it (concurrent <= 0)."""
    path = os.path.realpath(folder)
    closed = any(
        row.concurrent is not None
        and row.concurrent <= 0
        and os.path.isabs(row.scope)
        and os.path.realpath(row.scope) == path
        for row in limits
    )
    return path, closed


def _repo_limit(repo: str, limits: tuple[ScopedLimit, ...]) -> int | None:
    for row in limits:
        if row.scope.lower() == repo and row.concurrent is not None:
            return row.concurrent
    return None


def _chained(parent: str, label: str, busy: Busy) -> str:
    if busy.holder is None:
        return f"waits for its parent's {label}: {busy.detail}"
    whose = "its parent" if busy.holder == parent else f"not its parent {parent}"
    return f"waits for its parent's {label}, held by job {busy.holder} ({whose})"
