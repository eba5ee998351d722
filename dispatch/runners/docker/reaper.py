"""The reaper: clear away this host's containers that nobody owns, at daemon start (what a
predecessor left) and then every minute (what a lost claim left; `dispatch/daemon/boot.py`).

A daemon that died mid-job (SIGKILL, power loss) leaves its containers running or exited.
At the next start, before this host's fleet claims are freed, `reap` lists every container
labelled `dispatch.host=<host>` and asks `owned(job_id, fence)` whether a live claim still
owns it; those that none owns are stopped (SIGTERM, then SIGKILL after the grace) and removed,
concurrently, each logged `container_reaped`. A container without a job label is reaped too:
it carries our host label, so we made it, and no claim can own it.

If the engine cannot be listed the report says so (`listed=False`) and nothing counts as
reaped; a container that could not be removed is in `failed`. Either way the caller must not
free claims on the belief that their containers are gone (`DockerRunner.reap` answers False).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatch.log import event
from dispatch.runners.docker.client import DockerClient, Json
from dispatch.runners.docker.errors import ContainerNotFound, DockerError
from dispatch.runners.docker.labels import LABEL_ATTEMPT, LABEL_FENCE, LABEL_HOST, LABEL_JOB


@dataclass(frozen=True)
class Reaped:
    container: str  # name, without the leading slash
    job: str
    attempt: str
    fence: str


@dataclass(frozen=True)
class ReapReport:
    listed: bool
    error: str = ""
    reaped: list[Reaped] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # owned by a live claim
    failed: list[str] = field(default_factory=list)  # could not be removed; still there


def _describe(info: Json) -> Reaped:
    names = info.get("Names") or [info.get("Id", "?")[:12]]
    found = info.get("Labels") or {}
    return Reaped(
        container=str(names[0]).lstrip("/"),
        job=found.get(LABEL_JOB, ""),
        attempt=found.get(LABEL_ATTEMPT, ""),
        fence=found.get(LABEL_FENCE, ""),
    )


async def _reap_one(client: DockerClient, info: Json, grace_s: float) -> bool:
    cid = str(info["Id"])
    try:
        if info.get("State") == "running":
            await client.stop(cid, grace_s)
        await client.remove(cid, force=True)
    except ContainerNotFound:
        pass  # gone already: what we wanted
    except DockerError as exc:
        event("container_reap_failed", container=cid[:12], error=str(exc))
        return False
    return True


async def reap(
    client: DockerClient,
    host: str,
    owned: Callable[[str, str], bool],
    *,
    grace_s: float = 10.0,
) -> ReapReport:
    """Stop and remove this host's containers that no live claim owns."""
    try:
        found = await client.list_containers({LABEL_HOST: host})
    except DockerError as exc:
        event("reap_unlisted", host=host, error=str(exc))
        return ReapReport(listed=False, error=str(exc))
    orphans = [c for c in found if not _is_owned(c, owned)]
    kept = [_describe(c).container for c in found if c not in orphans]
    results = await asyncio.gather(*(_reap_one(client, c, grace_s) for c in orphans))
    reaped = [_describe(c) for c, ok in zip(orphans, results, strict=True) if ok]
    failed = [_describe(c).container for c, ok in zip(orphans, results, strict=True) if not ok]
    for r in reaped:
        event("container_reaped", container=r.container, job=r.job, attempt=r.attempt)
    return ReapReport(listed=True, reaped=reaped, kept=kept, failed=failed)


def _is_owned(info: Json, owned: Callable[[str, str], bool]) -> bool:
    d = _describe(info)
    return bool(d.job) and owned(d.job, d.fence)
