from __future__ import annotations

import itertools
import posixpath
from typing import Any

import pytest

from dispatch.config.schemas import ConfigSnapshot, Project
from dispatch.gates.base import Admit
from dispatch.gates.project import ProjectGate, resolve_project, within
from dispatch.model import Job
from tests.support.pickups import pickup_of

WEB = Project(id="web", repos=["Acme/Web"], folders=["/srv/web/"])
SITE = Project(id="site", folders=["/srv", "/srv/site"])
SITE_TOO = Project(id="site-too", folders=["/srv/site/"])
ROWS = (WEB, SITE, SITE_TOO)


def forge(repo: str, **kw: Any) -> Job:
    return Job(id="j1", kind="forge", repo=repo, number=1, **kw)


def local(folder: str, **kw: Any) -> Job:
    return Job(id="j1", kind="local", folder=folder, **kw)


def test_a_named_project_is_its_row_whatever_the_membership() -> None:
    assert resolve_project(forge("acme/web", project="site"), ROWS) is SITE


def test_an_undeclared_name_is_a_project_without_bounds() -> None:
    assert resolve_project(local("/srv/web", project="ghost"), ROWS) == Project(id="ghost")


def test_a_forge_job_by_repo_case_insensitive() -> None:
    assert resolve_project(forge("ACME/web"), ROWS) is WEB
    assert resolve_project(forge("acme/other"), ROWS) is None


def test_a_local_job_by_folder_longest_match_wins() -> None:
    assert resolve_project(local("/srv/web/src"), ROWS) is WEB
    assert resolve_project(local("/srv/other"), ROWS) is SITE
    assert resolve_project(local("/opt/x"), ROWS) is None


def test_a_tie_goes_to_the_first_row() -> None:
    assert resolve_project(local("/srv/site/a"), ROWS) is SITE
    assert resolve_project(local("/srv/site"), (SITE_TOO, SITE)) is SITE_TOO


def test_folders_match_by_whole_components_and_ignore_trailing_slashes() -> None:
    assert resolve_project(local("/srv/webapp"), (WEB,)) is None
    assert resolve_project(local("/srv/web/"), (WEB,)) is WEB
    assert within("/srv/a//b/", "/srv/a") and not within("/srv/ab", "/srv/a")
    assert within("/anything", "/")


def test_membership_follows_the_kind() -> None:
    # a forge job is not placed by folder, a local one not by repo, a plain one not at all
    assert resolve_project(local("/srv/x", repo="acme/web"), (WEB,)) is None
    assert resolve_project(Job(id="j1"), ROWS) is None


@pytest.mark.anyio
async def test_gate_sets_the_project_and_admits() -> None:
    pickup = pickup_of(forge("acme/web"), config=ConfigSnapshot(projects=ROWS))
    assert await ProjectGate().check(pickup) == Admit()
    assert pickup.project is WEB


# The rows are indexed (by id, repo and folder); the answer is the one a scan of every row gives.

FOLDERS = [
    "/",
    "//",
    "/srv",
    "/srv/",
    "/srv/web",
    "/srv/web/",
    "/srv/webapp",
    "/srv/web/src",
    "//srv",
]


def scanned(job: Job, rows: list[Project]) -> Project | None:
    """The reading the index must agree with: every row, in order."""
    if job.project:
        return next((r for r in rows if r.id == job.project), Project(id=job.project))
    if job.kind == "forge" and job.repo:
        repo = job.repo.casefold()
        return next((r for r in rows if repo in {x.casefold() for x in r.repos}), None)
    best, best_len = None, -1
    for row in rows if job.kind == "local" and job.folder else []:
        for root in row.folders:
            length = len(posixpath.normpath(root))
            if length > best_len and within(job.folder or "", root):
                best, best_len = row, length
    return best


JOBS = [
    *(forge(repo) for repo in ("acme/web", "ACME/ops", "acme/x")),
    *(local(folder) for folder in [*FOLDERS, "/srv/web/src/deep", "/opt", "//srv/x"]),
    *(forge("acme/web", project=name) for name in ("web", "ops", "ghost")),
]


def test_the_index_finds_the_row_a_scan_of_every_row_finds() -> None:
    for first, second in itertools.product(FOLDERS, repeat=2):
        rows = [
            Project(id="web", repos=["Acme/Web"], folders=[first]),
            Project(id="ops", repos=["acme/web", "acme/ops"], folders=[second, "/opt/x"]),
            Project(id="web", folders=[second]),  # an id twice: the first row wins
        ]
        for job in JOBS:
            assert resolve_project(job, rows) == scanned(job, rows), (job, first, second)
            assert resolve_project(job, rows[::-1]) == scanned(job, rows[::-1])


@pytest.mark.anyio
async def test_one_gate_reads_each_new_file_as_it_comes() -> None:
    gate = ProjectGate()  # its index is kept per file: a new file is a new tuple of rows
    other = Project(id="other", repos=["acme/web"], folders=["/srv"])
    for rows, found in (((WEB,), WEB), ((SITE,), None), ((other, WEB), other)):
        pickup = pickup_of(forge("acme/web"), config=ConfigSnapshot(projects=rows))
        assert await gate.check(pickup) == Admit()
        assert pickup.project is found
    pickup = pickup_of(local("/srv/web/src"), config=ConfigSnapshot(projects=(other, WEB)))
    await gate.check(pickup)
    assert pickup.project is not None and pickup.project.id == "web"  # the longer folder
