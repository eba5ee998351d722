"""Folder gate: a local job's folder, resolved once per pickup into `pickup.folder`.

Every later gate (project, pause window, scope and folder mutex, dirty tree, job user, spend
caps) and the runner use that one path and never the job's spelling, so a job submitted
through a symlink counts in its real folder's project, pause windows and limits, and the
runner mounts exactly the folder the mutex holds (it refuses `mount-mismatch` when the job's
folder no longer resolves there just before the create: a symlink re-pointed in between).

With `DISPATCH_ALLOWED_ROOTS` set, a folder that does not resolve to a directory under one of
them is refused `folder-not-allowed` here, before any hold is taken; without it the folder is
only resolved (the process runner runs anywhere; the docker runner refuses every local job).
"""

from __future__ import annotations

import os

import anyio

from dispatch.gates.base import ADMIT, Decision, Pickup, Refuse
from dispatch.host.files import allowed_folder
from dispatch.reasons import FOLDER_NOT_ALLOWED


class FolderGate:
    name = "folder"

    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots

    async def check(self, pickup: Pickup) -> Decision:
        job = pickup.job
        if job.kind != "local" or not job.folder:
            return ADMIT
        # realpath touches the filesystem (maybe a slow mount), so not on the event loop
        real = await anyio.to_thread.run_sync(self._resolve, job.folder)
        if real is None:
            return Refuse(
                FOLDER_NOT_ALLOWED,
                f"folder {job.target()} is not a directory under DISPATCH_ALLOWED_ROOTS",
            )
        pickup.folder = real
        return ADMIT

    def _resolve(self, folder: str) -> str | None:
        if self.roots:
            return allowed_folder(folder, self.roots)
        return os.path.realpath(folder)
