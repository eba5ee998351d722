"""Project gate: which project a job belongs to, resolved once per pickup into `pickup.project`.

A job that names its project gets that row; a name projects.json does not declare still makes
a project (without bounds) rather than failing the job. Otherwise membership decides: a forge
job's repo (case-insensitive), or a local job's folder lying in one of a row's folders (the
longest matching folder wins; a tie goes to the row written first). The gate always admits.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from dispatch.config.schemas import Project
from dispatch.gates.base import ADMIT, Decision, Pickup
from dispatch.model import Job


def within(folder: str, root: str) -> bool:
    """Whether `folder` is `root` or lies under it, by whole path components."""
    folder, root = posixpath.normpath(folder), posixpath.normpath(root)
    return folder == root or folder.startswith(root if root.endswith("/") else root + "/")


def resolve_project(job: Job, projects: Iterable[Project]) -> Project | None:
    rows = list(projects)
    if job.project:
        named = next((row for row in rows if row.id == job.project), None)
        return named if named is not None else Project(id=job.project)
    if job.kind == "forge" and job.repo:
        repo = job.repo.casefold()
        return next((row for row in rows if repo in {r.casefold() for r in row.repos}), None)
    if job.kind == "local" and job.folder:
        return _by_folder(job.folder, rows)
    return None


def _by_folder(folder: str, rows: list[Project]) -> Project | None:
    best: Project | None = None
    best_len = -1
    for row in rows:
        for root in row.folders:
            length = len(posixpath.normpath(root))
            # strictly longer only, so an equal match keeps the earlier row
            if length > best_len and within(folder, root):
                best, best_len = row, length
    return best


class ProjectGate:
    name = "project"

    async def check(self, pickup: Pickup) -> Decision:
        pickup.project = resolve_project(pickup.job, pickup.config.projects)
        return ADMIT
