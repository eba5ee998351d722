"""A local job on a git repo through the daemon, the CLI and the real engine, as an operator
submits one: it writes its folder as the folder's owner, and a folder owned by root is refused
before anything is spent."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from dispatch.runners.docker import DockerClient
from dispatch.runners.docker.labels import LABEL_HOST
from tests.support.daemons import daemon, dispatch, dispatch_json, docker_env, wait_state

OWNER = 1000
WRITE = ["sh", "-c", "echo hi > new.txt"]


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    roots = tmp_path / "roots"
    roots.mkdir()
    return roots


@pytest.fixture
def env(
    redis_url: str, prefix: str, tmp_path: Path, image: str, host_label: str, roots: Path
) -> dict[str, str]:
    return docker_env(
        redis_url, prefix, tmp_path / "state", host_label, image, DISPATCH_ALLOWED_ROOTS=str(roots)
    )


def git_repo(path: Path, owner: int | None) -> Path:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    if owner is not None:
        for p in [path, *path.rglob("*")]:
            os.lchown(p, owner, owner)
    return path


def creates(docker_host: str, host: str, since_s: float) -> list[str]:
    """The containers the engine created for `host` since `since_s`."""

    async def ask() -> list[str]:
        async with DockerClient(docker_host) as client:
            found = await client.events(
                {"label": [f"{LABEL_HOST}={host}"], "event": ["create"]}, since_s, time.time()
            )
        return [e["id"] for e in found]

    return asyncio.run(ask())


def submit(env: dict[str, str], folder: Path) -> str:
    done = dispatch(env, "submit", "--folder", str(folder), "--", *WRITE)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the repo to a user")
def test_a_local_job_writes_its_folder_as_the_folders_owner(
    env: dict[str, str], roots: Path
) -> None:
    repo = git_repo(roots / "web", OWNER)
    with daemon(env):
        job_id = submit(env, repo)
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
    made = (repo / "new.txt").stat()
    assert (made.st_uid, made.st_gid) == (OWNER, OWNER)
    (record,) = dispatch_json(env, "runs")
    assert (record["outcome"], record["exit_code"]) == ("completed", 0)


def test_a_folder_owned_by_root_is_refused_before_anything_is_spent(
    env: dict[str, str], roots: Path, docker_host: str, host_label: str
) -> None:
    repo = git_repo(roots / "web", None)
    since_s = time.time() - 1
    with daemon(env):
        job_id = submit(env, repo)
        assert wait_state(env, job_id, "failed", "completed", timeout=60) == "failed"
    (record,) = dispatch_json(env, "runs")
    assert (record["outcome"], record["reason"]) == ("policy", "job-user-root")
    assert "chown" in record["sentence"] and "DISPATCH_CONTAINER_USER" in record["sentence"]
    assert record.get("started_at") is None
    assert creates(docker_host, host_label, since_s) == []  # no container was ever made
    assert not (repo / "new.txt").exists()
