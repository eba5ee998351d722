"""Project gate: which project a job belongs to, resolved once per pickup into `pickup.project`.

A job that names its project gets that row; a name projects.json does not declare still makes
a project (without bounds) rather than failing the job. Otherwise membership decides: a forge
job's repo (case-insensitive), or a local job's folder lying in one of a row's folders (the
longest matching folder wins; a tie goes to the row written first), both the folder gate's
resolved folder and the rows' folders resolved, so a symlink on either side changes nothing.
The gate always admits.

The rows are indexed once per snapshot (`Projects`: by id, by repo, by folder), so a pickup
looks up its own few keys rather than reading every row.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable

import msgspec

from dispatch.config.schemas import Project
from dispatch.gates.base import ADMIT, Decision, PerSnapshot, Pickup
from dispatch.model import Job


def within(folder: str, root: str) -> bool:
    """Whether `folder` is `root` or lies under it, by whole path components."""
    folder, root = posixpath.normpath(folder), posixpath.normpath(root)
    return folder == root or folder.startswith(root if root.endswith("/") else root + "/")


def root_key(root: str) -> str:
    """What `folder_keys` meets a root by: normalised, without a trailing slash."""
    root = posixpath.normpath(root)
    return root[:-1] if root.endswith("/") else root


def folder_keys(folder: str) -> list[str]:
    """The `root_key` of every root the folder lies `within`, the longest first: the folder
    itself and its every prefix that ends before a slash ("" for "/")."""
    folder = posixpath.normpath(folder)
    cuts = [i for i, c in enumerate(folder) if c == "/"]
    own = [] if folder.endswith("/") else [folder]  # "/" and "//": their prefixes say it all
    return [*own, *(folder[:i] for i in reversed(cuts))]


class Projects:
    """The rows of one snapshot indexed by what a job is matched by; the earlier row wins."""

    def __init__(self, rows: Iterable[Project]) -> None:
        self.by_id: dict[str, Project] = {}
        self.by_repo: dict[str, Project] = {}
        self.by_root: dict[str, Project] = {}
        for row in rows:
            self.by_id.setdefault(row.id, row)
            for repo in row.repos:
                self.by_repo.setdefault(repo.casefold(), row)
            for root in row.folders:
                self.by_root.setdefault(root_key(root), row)

    def of(self, job: Job, folder: str | None = None) -> Project | None:
        """The job's project; a local job's by `folder` (resolved; else its own spelling)
        lying in one of a row's folders, the longest such folder."""
        if job.project:
            named = self.by_id.get(job.project)
            return named if named is not None else Project(id=job.project)
        if job.kind == "forge" and job.repo:
            return self.by_repo.get(job.repo.casefold())
        if job.kind == "local" and job.folder:
            keys = folder_keys(folder or job.folder)
            return next((self.by_root[k] for k in keys if k in self.by_root), None)
        return None


def resolve_project(
    job: Job, projects: Iterable[Project], folder: str | None = None
) -> Project | None:
    """The job's project; a local job's by `folder` (resolved; else its own spelling) lying in
    one of a row's folders (compare them resolved too: `real_rows`)."""
    return Projects(projects).of(job, folder)


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
        self._rows: tuple[tuple[Project, ...], Projects] = ((), Projects(()))
        self._real: PerSnapshot[tuple[Project, ...], Projects] = PerSnapshot(
            _index_real, ()
        )  # the rows resolved, once per snapshot

    async def check(self, pickup: Pickup) -> Decision:
        rows = pickup.config.projects
        if pickup.folder is not None and not pickup.job.project:
            projects = await self._real.of(rows)
        else:
            projects = self._index(rows)
        pickup.project = projects.of(pickup.job, pickup.folder)
        return ADMIT

    def _index(self, rows: tuple[Project, ...]) -> Projects:
        """The rows indexed once per snapshot (a new file is a new tuple)."""
        if self._rows[0] is not rows:
            self._rows = (rows, Projects(rows))
        return self._rows[1]


def _index_real(rows: tuple[Project, ...]) -> Projects:
    return Projects(real_rows(rows))
