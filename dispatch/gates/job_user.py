"""Job-user gate: a local job's container runs as the owner of its folder
(`dispatch.runners.docker.user`), so a folder that belongs to root would make a root container.
Such a job is refused `job-user-root` here, before any slot, lease, budget or container is
taken, with a sentence saying how to fix it.

Only the docker runner has a container user (the process runner runs jobs as the daemon), and
an explicit `DISPATCH_CONTAINER_USER` decides for every job, so neither is checked. A folder
outside the allowed roots, or gone, is left to the runner, which refuses it
`folder-not-allowed`: its owner means nothing then, and advice to chown it would be wrong. The
runner reads the owner once more when it builds the container, so a folder handed to root in
between is refused there, still before anything runs. Sentences name the folder's basename
only: records are read fleet-wide.
"""

from __future__ import annotations

import anyio

from dispatch.config.schemas import ConfigSnapshot
from dispatch.gates.base import ADMIT, Decision, Pickup, Refuse
from dispatch.reasons import JOB_USER_ROOT
from dispatch.runners.docker.mounts import allowed_folder
from dispatch.runners.docker.settings import DockerSettings
from dispatch.runners.docker.user import job_user


class JobUserGate:
    name = "job-user"

    def __init__(self, docker: DockerSettings | None) -> None:
        self.docker = docker  # None: not the docker runner

    def inert(self, config: ConfigSnapshot) -> bool:
        return self.docker is None or self.docker.user is not None

    async def check(self, pickup: Pickup) -> Decision:
        job, docker = pickup.job, self.docker
        if docker is None or docker.user is not None or job.kind != "local":
            return ADMIT
        # realpath and stat touch the filesystem (maybe a slow mount), so not on the event loop
        if not await anyio.to_thread.run_sync(_root_owned, job.folder, docker.allowed_roots):
            return ADMIT
        return Refuse(
            JOB_USER_ROOT,
            f"folder {job.target()} belongs to root, and a job never runs as root unasked: "
            "chown it to the user the job should run as, or set DISPATCH_CONTAINER_USER",
        )


def _root_owned(folder: str | None, roots: tuple[str, ...]) -> bool:
    source = allowed_folder(folder, roots)
    if source is None:
        return False
    try:
        return job_user(source, None) is None
    except OSError:
        return False
