"""Job-user gate: a local job on a folder owned by root is refused before any hold is taken."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dispatch.daemon.assembly import job_user_rule
from dispatch.gates.base import ADMIT, Refuse
from dispatch.gates.job_user import JobUserGate
from dispatch.model import Job
from dispatch.runners.docker import DockerSettings
from tests.support.pickups import hold_names, pickup_of

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand folders to other users"),
]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "web").mkdir(parents=True)  # made by root: it belongs to root
    return root


def _gate(root: Path, **settings: object) -> JobUserGate:
    docker = DockerSettings(allowed_roots=(str(root),), **settings)  # type: ignore[arg-type]
    return JobUserGate(job_user_rule(docker))


def _local(folder: Path) -> Job:
    return Job(id="j1", kind="local", folder=str(folder), command=["true"])


async def test_a_folder_owned_by_root_is_refused_with_how_to_fix_it(root: Path) -> None:
    pickup = pickup_of(_local(root / "web"))
    decision = await _gate(root).check(pickup)
    assert decision == Refuse(
        "job-user-root",
        "folder web belongs to root, and a job never runs as root unasked: chown it to the "
        "user the job should run as, or set DISPATCH_CONTAINER_USER",
    )
    assert hold_names(pickup) == []


async def test_the_owner_counted_is_the_resolved_folders(root: Path) -> None:
    (root / "link").symlink_to(root / "web")
    assert isinstance(await _gate(root).check(pickup_of(_local(root / "link"))), Refuse)
    os.chown(root / "web", 1000, 1000)
    assert await _gate(root).check(pickup_of(_local(root / "link"))) == ADMIT


async def test_a_folder_owned_by_a_user_is_admitted(root: Path) -> None:
    os.chown(root / "web", 1000, 0)  # a group of 0 is not root: the job runs as 1000:65534
    assert await _gate(root).check(pickup_of(_local(root / "web"))) == ADMIT


@pytest.mark.parametrize("configured", ["", "0", "root", "1000:1000"])
async def test_an_explicit_user_decides_for_every_job(root: Path, configured: str) -> None:
    gate = _gate(root, user=configured)
    assert await gate.check(pickup_of(_local(root / "web"))) == ADMIT


async def test_what_the_runner_refuses_anyway_is_left_to_it(root: Path, tmp_path: Path) -> None:
    # outside the roots or gone: the runner says folder-not-allowed, not "chown /etc"
    for folder in (Path("/etc"), root / "gone"):
        assert await _gate(root).check(pickup_of(_local(folder))) == ADMIT


async def test_jobs_without_a_folder_and_other_runners_pass(root: Path) -> None:
    assert await _gate(root).check(pickup_of(Job(id="j2", command=["true"]))) == ADMIT
    assert await JobUserGate(None).check(pickup_of(_local(root / "web"))) == ADMIT
