"""Project gate: which project a job belongs to, resolved once per pickup into `pickup.project`.

A job that names its project gets that row; a name projects.json does not declare still makes
a project (without bounds) rather than failing the job. Otherwise membership decides: a forge
job's repo (case-insensitive), or a local job's folder lying in one of a row's folders (the
longest matching folder wins; a tie goes to the row written first), both the folder gate's
resolved folder and the rows' folders resolved, so a symlink on either side changes nothing.
The gate always admits.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable

import anyio
import msgspec

from dispatch.config.schemas import Project
from dispatch.gates.base import ADMIT, Decision, Pickup
from dispatch.model import Job


def within(folder: str, root: str) -> bool:
    """Whether `folder` is `root` or lies under it, by whole path components."""
    folder, root = posixpath.normpath(folder), posixpath.normpath(root)
    return folder == root or folder.startswith(root if root.endswith("/") else root + "/")


def resolve_project(
    job: Job, projects: Iterable[Project], folder: str | None = None
) -> Project | None:
    """The job's project; a local job's by `folder` (resolved; else its own spelling) lying in
    one of a row's folders (compare them resolved too: `real_rows`)."""
    rows = list(projects)
    if job.project:
        named = next((row for row in rows if row.id == job.project), None)
        return named if named is not None else Project(id=job.project)
    if job.kind == "forge" and job.repo:
        repo = job.repo.casefold()
        return next((row for row in rows if repo in {r.casefold() for r in row.repos}), None)
    if job.kind == "local" and job.folder:
        return _by_folder(folder or job.folder, rows)
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


def real_rows(projects: tuple[Project, ...]) -> tuple[Project, ...]:
    """The rows with their folders resolved, so a symlinked row and a symlinked job folder
    meet on the real path. Touches the filesystem: off the event loop."""
    return tuple(
        msgspec.structs.replace(row, folders=[os.path.realpath(f) for f in row.folders])
        if row.folders
        else row
        for row in projects
    )


class ProjectGate:
    name = "project"

    def __init__(self) -> None:
        self._rows: tuple[tuple[Project, ...], tuple[Project, ...]] = ((), ())

    async def check(self, pickup: Pickup) -> Decision:
        rows = pickup.config.projects
        if pickup.folder is not None and not pickup.job.project:
            rows = await self._real(rows)
        pickup.project = resolve_project(pickup.job, rows, pickup.folder)
        return ADMIT

    async def _real(self, rows: tuple[Project, ...]) -> tuple[Project, ...]:
        """The rows resolved once per snapshot (a new file is a new tuple)."""
        seen, real = self._rows
        if seen is not rows:
            real = await anyio.to_thread.run_sync(real_rows, rows)
            self._rows = (rows, real)
        return real
