"""The boot reaper against the real engine."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import uuid
from typing import Any

import pytest

from dispatch.runners.docker import (
    LABEL_FENCE,
    LABEL_HOST,
    LABEL_JOB,
    ContainerNotFound,
    DockerClient,
    reap,
)
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


async def _labelled(docker: DockerClient, image: str, host: str, job: str) -> str:
    config = {
        "Image": image,
        "Cmd": ["sleep", "60"],
        "Labels": {LABEL_HOST: host, LABEL_JOB: job, LABEL_FENCE: "3"},
    }
    cid = await docker.create_container(f"dispatch-job-{job}", config)
    await docker.start(cid)
    return cid


async def test_reaps_orphans_and_keeps_owned(docker, image, host_label):
    orphan_job, owned_job = f"o{uuid.uuid4().hex[:10]}", f"k{uuid.uuid4().hex[:10]}"
    orphan = await _labelled(docker, image, host_label, orphan_job)
    owned = await _labelled(docker, image, host_label, owned_job)
    asked: list[tuple[str, str]] = []

    def owns(job: str, fence: str) -> bool:
        asked.append((job, fence))
        return job == owned_job

    try:
        report = await reap(docker, host_label, owns, grace_s=1)
        assert report.listed and report.failed == []
        assert [r.job for r in report.reaped] == [orphan_job]
        assert report.reaped[0].fence == "3"
        assert report.kept == [f"dispatch-job-{owned_job}"]
        assert sorted(asked) == sorted([(orphan_job, "3"), (owned_job, "3")])
        with pytest.raises(ContainerNotFound):
            await docker.inspect(orphan)
        assert (await docker.inspect(owned))["State"]["Running"]
    finally:
        await docker.remove(owned, force=True)


async def test_unlisted_engine_reaps_nothing(tmp_path):
    async with DockerClient(f"unix://{tmp_path}/none.sock", timeout_s=2) as client:
        report = await reap(client, "h", lambda job, fence: False)
    assert not report.listed and report.error and report.reaped == []


_DAEMON = """
import asyncio, sys
from pathlib import Path
from dispatch.runners.docker import DockerClient, DockerRunner, DockerSettings
from dispatch.model import Job
from dispatch.runners.base import RunContext

async def main() -> None:
    job = Job(id=sys.argv[2], image=sys.argv[3], command=["sleep", "60"])
    out = Path(sys.argv[4])
    ctx = RunContext(job=job, attempt=1, host=sys.argv[1], fence="9", output_dir=out.parent,
                     output_file=out.name)
    async with DockerClient() as client:
        await DockerRunner(DockerSettings(), client).run(ctx)

asyncio.run(main())
"""


async def test_container_of_a_killed_daemon_is_reaped(docker, image, host_label, tmp_path):
    job = f"d{uuid.uuid4().hex[:10]}"
    args = [host_label, job, image, str(tmp_path / "out.log")]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    code = textwrap.dedent(_DAEMON)
    daemon = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, env=env, stderr=asyncio.subprocess.DEVNULL
    )

    async def started() -> list[dict[str, Any]]:
        found = await docker.list_containers({LABEL_HOST: host_label})
        return [c for c in found if c["State"] == "running"]

    try:
        await eventually(started, timeout=15, every=0.05)  # created, waited on and started
    finally:
        daemon.send_signal(signal.SIGKILL)
        await daemon.wait()
    left = await docker.list_containers({LABEL_HOST: host_label})
    assert len(left) == 1  # the dead daemon could not clean up
    report = await reap(docker, host_label, lambda job, fence: False, grace_s=1)
    assert [r.job for r in report.reaped] == [job]
    assert await docker.list_containers({LABEL_HOST: host_label}) == []
