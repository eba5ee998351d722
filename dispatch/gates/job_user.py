"""Job-user gate: a local job's container runs as the owner of its folder
(`dispatch.runners.docker.user`), so a folder that belongs to root would make a root container.
Such a job is refused `job-user-root` here, before any slot, lease, budget or container is
taken, with a sentence saying how to fix it.

The rule, "this folder would make a root container", is the docker runner's, so the gate is
handed it (`RootOwned`, built by `dispatch.daemon.assembly.job_user_rule`) rather than
importing the runner. Only the docker runner has a container user (the process runner runs
jobs as the daemon), and an explicit `DISPATCH_CONTAINER_USER` decides for every job: for
either there is no rule, and nothing is checked. A folder outside the allowed roots, or gone,
is left to the runner, which refuses it `folder-not-allowed`: its owner means nothing then,
and advice to chown it would be wrong. The runner reads the owner once more when it builds the
container, so a folder handed to root in between is refused there, still before anything runs.
Sentences name the folder's basename only: records are read fleet-wide.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from dispatch.config.schemas import ConfigSnapshot
from dispatch.gates.base import ADMIT, Decision, Pickup, Refuse
from dispatch.reasons import JOB_USER_ROOT

RootOwned = Callable[[str | None], bool]
"""Whether a local job's folder is under the allowed roots and belongs to root; it touches the
filesystem (realpath, stat), so the gate calls it off the event loop."""


class JobUserGate:
    name = "job-user"

    def __init__(self, root_owned: RootOwned | None) -> None:
        self.root_owned = root_owned  # None: no container user to check (see the docstring)

    def inert(self, config: ConfigSnapshot) -> bool:
        return self.root_owned is None

    async def check(self, pickup: Pickup) -> Decision:
        job, root_owned = pickup.job, self.root_owned
        if root_owned is None or job.kind != "local":
            return ADMIT
        # realpath and stat touch the filesystem (maybe a slow mount), so not on the event loop
        if not await anyio.to_thread.run_sync(root_owned, pickup.real_folder):
            return ADMIT
        return Refuse(
            JOB_USER_ROOT,
            f"folder {job.target()} belongs to root, and a job never runs as root unasked: "
            "chown it to the user the job should run as, or set DISPATCH_CONTAINER_USER",
        )
