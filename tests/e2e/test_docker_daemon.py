"""The docker runner through the daemon and the CLI, as an operator runs it."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from dispatch.runners.docker import DockerClient
from dispatch.runners.docker.labels import LABEL_HOST
from tests.support.daemons import daemon, dispatch, dispatch_json, docker_env, wait_state
from tests.support.polling import eventually_sync


def containers(docker_host: str, host: str) -> list[str]:
    async def names() -> list[str]:
        async with DockerClient(docker_host) as client:
            found = await client.list_containers({LABEL_HOST: host})
        return [c["Id"] for c in found]

    return asyncio.run(names())


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path, image: str, host_label: str) -> dict[str, str]:
    return docker_env(redis_url, prefix, tmp_path / "state", host_label, image)


def test_a_job_runs_in_a_container_and_leaves_none(
    env: dict[str, str], image: str, docker_host: str, host_label: str
) -> None:
    with daemon(env):
        job_id = dispatch(
            env, "submit", "--image", image, "--", "sh", "-c", "echo hi"
        ).stdout.strip()
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
    (record,) = dispatch_json(env, "runs")
    assert (record["outcome"], record["exit_code"], record["image"]) == ("completed", 0, image)
    assert record["container"] == f"dispatch-job-{job_id}"
    assert Path(record["output"]).read_text() == "hi\n"
    assert containers(docker_host, host_label) == []


def test_a_missing_image_is_refused_before_anything_starts(
    env: dict[str, str], docker_host: str, host_label: str
) -> None:
    with daemon(env):
        job_id = dispatch(env, "submit", "--image", "no-such-image:1", "--", "true").stdout.strip()
        assert wait_state(env, job_id, "failed", "completed", timeout=60) == "failed"
    (record,) = dispatch_json(env, "runs")
    assert (record["outcome"], record["reason"]) == ("policy", "image-missing")
    assert containers(docker_host, host_label) == []


def test_the_next_start_reaps_what_a_killed_daemon_left(
    env: dict[str, str], image: str, docker_host: str, host_label: str
) -> None:
    with daemon(env) as first:
        job_id = dispatch(env, "submit", "--image", image, "--", "sleep", "120").stdout.strip()
        (orphan,) = eventually_sync(lambda: containers(docker_host, host_label), 60)
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert containers(docker_host, host_label) == [orphan]  # it outlived its daemon
    with daemon(env):
        eventually_sync(lambda: orphan not in containers(docker_host, host_label), 60)
        # its job is handed back at boot and runs again, in a new container
        assert wait_state(env, job_id, "active", timeout=60) == "active"
        assert dispatch(env, "cancel", job_id).returncode == 0
        assert wait_state(env, job_id, "cancelled", timeout=60) == "cancelled"
    assert containers(docker_host, host_label) == []


def test_doctor_passes_on_a_healthy_host_and_names_each_failure(env: dict[str, str]) -> None:
    healthy = dispatch(env, "doctor")
    assert healthy.returncode == 0, healthy.stdout
    names = [line.split()[1] for line in healthy.stdout.splitlines()]
    checks = [
        "redis",
        "redis-version",
        "redis-topology",
        "maxmemory-policy",
        "scripts",
        "docker",
        "image",
    ]
    assert names[:8] == [*checks, "config"]
    assert "job-network" in names[8:]  # and the egress lines that apply (tests/e2e/test_egress.py)
    broken = dispatch(
        {**env, "DISPATCH_REDIS_URL": "redis://127.0.0.1:1/0", "DISPATCH_IMAGE": "nope:1"}, "doctor"
    )
    assert broken.returncode == 1
    failed = [line.split()[1] for line in broken.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == ["redis", "image"]
