"""A daemon's boot after a crash, with real daemon processes, a real Redis and a real engine:
the jobs its predecessor was running are handed back at once (no lapse, no stall, no attempt
spent) once their runs are gone, and the reaper removes only what no live claim owns, at boot
and in the reconcile that repeats it. While the boot cannot reap (the engine is away), it is
retried, and nothing is claimed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis

from dispatch.queue.keys import queue_keys
from dispatch.queue.transitions import NewJob, Queue
from dispatch.runners.docker import ContainerConflict, ContainerNotFound, DockerClient
from dispatch.runners.docker.labels import LABEL_FENCE, LABEL_HOST, LABEL_JOB
from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync

pytestmark = pytest.mark.e2e


def test_a_restarted_daemon_hands_its_jobs_back_at_once_and_each_completes_once(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    # a 60 s lock and no stall allowed: a job left to lapse would wait a minute, then fail
    env = cli_env(
        redis_url, prefix, tmp_path / "state", DISPATCH_HOST="h1", DISPATCH_LOCK_MS="60000",
        DISPATCH_MAX_STALLS="0",
    )  # fmt: skip
    script = f"echo start >> {trace}; sleep 2; echo end >> {trace}"
    with daemon(env) as first:
        job_id = dispatch(env, "submit", "--", "sh", "-c", script).stdout.strip()
        eventually_sync(lambda: trace.exists() and "start" in trace.read_text(), 20)
        first.send_signal(signal.SIGKILL)
        first.wait()
    restarted = time.monotonic()
    with daemon(env):
        assert wait_state(env, job_id, "completed", "failed", timeout=40) == "completed"
    assert time.monotonic() - restarted < 40  # well within the 60 s lock
    assert trace.read_text().split() == ["start", "start", "end"]  # the first run died with h1
    (record,) = dispatch_json(env, "runs")
    assert (record["host"], record["outcome"], record["attempt"]) == ("h1", "completed", 1)
    with sync_redis.Redis.from_url(redis_url) as client:
        assert client.hget(queue_keys("jobs", prefix).stalls, job_id) is None


# -- docker --------------------------------------------------------------------------------


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _containers(docker_host: str, host: str) -> dict[str, str]:
    """This host's containers: job label -> state."""
    async with DockerClient(docker_host) as client:
        found = await client.list_containers({LABEL_HOST: host})
    return {c["Labels"][LABEL_JOB]: c["State"] for c in found}


async def _labelled(docker_host: str, image: str, host: str, job: str, fence: str) -> None:
    """A running container as a daemon of `host` would have left it for (job, fence)."""
    config = {
        "Image": image,
        "Cmd": ["sleep", "300"],
        "Labels": {LABEL_HOST: host, LABEL_JOB: job, LABEL_FENCE: fence},
    }
    async with DockerClient(docker_host) as client:
        made = await client.create_container(f"dispatch-job-{job}", config)
        # the daemon's reconcile may remove the orphan between the create and the start:
        # what the test waits for happened already
        with contextlib.suppress(ContainerConflict, ContainerNotFound):
            await client.start(made)


async def _remove(docker_host: str, host: str) -> None:
    async with DockerClient(docker_host) as client:
        for c in await client.list_containers({LABEL_HOST: host}):
            await client.remove(c["Id"], force=True)


async def _claim_as(redis_url: str, prefix: str, host: str, job_id: str) -> str:
    """A live claim of another process (host `host`), locked for ten minutes."""
    async with sync_redis.asyncio.Redis.from_url(redis_url) as redis:
        queue = Queue(redis, "jobs", prefix)
        await queue.enqueue([NewJob(job_id, b'{"id":"' + job_id.encode() + b'"}')])
        (claim,) = (await queue.claim(1, host, 600_000)).claims
        return claim.token


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path, image: str, host_label: str) -> dict[str, str]:
    return cli_env(
        redis_url, prefix, tmp_path / "state", DISPATCH_RUNNER="docker", DISPATCH_HOST=host_label,
        DISPATCH_IMAGE=image, DISPATCH_LOCK_MS="60000", DISPATCH_MAX_STALLS="0",
        DISPATCH_SHUTDOWN_GRACE="1s", DISPATCH_STOP_GRACE="1s", DISPATCH_RECONCILE_EVERY="1s",
    )  # fmt: skip


def test_the_boot_reaps_only_what_no_live_claim_owns(
    env: dict[str, str], redis_url: str, prefix: str, image: str, docker_host: str, host_label: str
) -> None:
    theirs, ghost = f"theirs-{uuid.uuid4().hex[:8]}", f"ghost-{uuid.uuid4().hex[:8]}"
    try:
        with daemon(env) as first:
            job_id = dispatch(env, "submit", "--", "sleep", "3").stdout.strip()
            eventually_sync(
                lambda: run(_containers(docker_host, host_label)) == {job_id: "running"}, 60
            )
            first.send_signal(signal.SIGKILL)
            first.wait()
        token = run(_claim_as(redis_url, prefix, "other", theirs))
        run(_labelled(docker_host, image, host_label, theirs, token))  # its claim is live
        run(_labelled(docker_host, image, host_label, ghost, f"{host_label}:999"))  # no claim
        with daemon(env):
            # the killed run's container and the orphan go; the job runs again at once
            eventually_sync(lambda: ghost not in run(_containers(docker_host, host_label)), 60)
            assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
            # the finished run's container goes in the background, after its exit was read
            eventually_sync(
                lambda: run(_containers(docker_host, host_label)) == {theirs: "running"}, 30
            )
        (record,) = dispatch_json(env, "runs")
        assert (record["outcome"], record["attempt"]) == ("completed", 1)
    finally:
        run(_remove(docker_host, host_label))


def test_the_reconcile_removes_an_orphan_and_keeps_a_running_job(
    env: dict[str, str], image: str, docker_host: str, host_label: str
) -> None:
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    try:
        with daemon(env):
            job_id = dispatch(env, "submit", "--", "sleep", "300").stdout.strip()
            eventually_sync(
                lambda: run(_containers(docker_host, host_label)) == {job_id: "running"}, 60
            )
            run(_labelled(docker_host, image, host_label, ghost, f"{host_label}:999"))
            eventually_sync(
                lambda: run(_containers(docker_host, host_label)) == {job_id: "running"}, 30
            )
            assert wait_state(env, job_id, "active") == "active"
            assert dispatch(env, "cancel", job_id).returncode == 0
            assert wait_state(env, job_id, "cancelled", timeout=60) == "cancelled"
    finally:
        run(_remove(docker_host, host_label))


def test_nothing_is_claimed_until_the_boot_could_reap(
    env: dict[str, str], docker_host: str, tmp_path: Path
) -> None:
    if not docker_host.startswith("unix://"):
        pytest.skip("the engine comes back as a symlink to its unix socket")
    engine = tmp_path / "engine.sock"  # no engine there yet: the boot cannot list containers
    away = {**env, "DOCKER_HOST": f"unix://{engine}"}
    job_id = dispatch(away, "submit", "--", "true").stdout.strip()
    with daemon(away):
        eventually_sync(lambda: daemon_log(away).count('"boot_retry"') >= 2, 30)
        assert wait_state(away, job_id, "waiting") == "waiting"  # retried, never claimed
        engine.symlink_to(docker_host.removeprefix("unix://"))  # the engine is back
        assert wait_state(away, job_id, "completed", "failed", timeout=60) == "completed"
