"""One folder from the gate to the mount (issue 26, item 1), on the real engine: the folder
gate resolves a local job's folder once, the folder mutex holds that path, and the runner
mounts exactly it. A symlink re-pointed between the gate and the create, into a folder another
running job holds, is refused `mount-mismatch`: no two containers ever share a folder, as the
engine's own account of each container's mounts shows."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from dispatch.fleet.folders import FolderLocks
from dispatch.gates.base import ADMIT
from dispatch.gates.folder import FolderGate
from dispatch.model import Job
from dispatch.reasons import MOUNT_MISMATCH, OPERATOR_CANCEL
from dispatch.runners.docker import DockerRunner, DockerSettings
from dispatch.runners.docker.errors import ContainerNotFound
from dispatch.runners.docker.labels import LABEL_HOST
from tests.support.docker import make_ctx
from tests.support.pickups import pickup_of
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

OWNER = 1000


def folder(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    os.chown(path, OWNER, OWNER)
    return path


def setup(tmp_path: Path, docker) -> tuple[Path, Path, Path, FolderGate, DockerRunner]:
    """root/a and root/c (owned by OWNER), the folder gate and a runner allowing root."""
    root = tmp_path / "root"
    root.mkdir()
    roots = (str(root),)
    runner = DockerRunner(DockerSettings(allowed_roots=roots), docker)
    return root, folder(root, "a"), folder(root, "c"), FolderGate(roots), runner


async def resolved(gate: FolderGate, spelled: Path) -> str:
    pickup = pickup_of(
        Job(id="j", command=["true"], kind="local", folder=str(spelled)), folder=None
    )
    assert await gate.check(pickup) == ADMIT and pickup.folder is not None
    return pickup.folder


async def mounts(docker, host: str) -> list[str]:
    """The bind sources of every container of this test's host, as the engine reports them."""
    found = []
    for row in await docker.list_containers({LABEL_HOST: host}):
        try:
            info = await docker.inspect(row["Id"])
        except ContainerNotFound:  # removed between the list and the inspect: it holds nothing
            continue
        found += [m["Source"] for m in info.get("Mounts") or [] if m.get("Type") == "bind"]
    return found


async def test_a_symlink_repointed_after_the_gate_never_mounts_a_held_folder(
    docker, tmp_path, host_label
) -> None:
    root, a, c, gate, runner = setup(tmp_path, docker)
    link = root / "link"
    link.symlink_to(c)
    locks = FolderLocks()

    z = make_ctx(tmp_path, host_label, ["sleep", "30"], kind="local", folder=str(a))
    z.folder = await resolved(gate, a)
    assert locks.try_acquire(z.folder, owner="z") is not None
    running = asyncio.create_task(runner.run(z))
    try:
        await eventually(lambda: mounts(docker, host_label), timeout=30)

        y = make_ctx(tmp_path, host_label, ["sleep", "30"], kind="local", folder=str(link))
        y.folder = await resolved(gate, link)
        assert y.folder == str(c) and locks.try_acquire(y.folder, owner="y") is not None
        os.remove(link)
        link.symlink_to(a)  # re-pointed between the gate and the create, into Z's folder

        result = await asyncio.wait_for(runner.run(y), 30)
        assert (result.started, result.refusal) == (False, MOUNT_MISMATCH)
        sources = await mounts(docker, host_label)
        assert sources == [str(a)], "one container, in the folder it holds"
    finally:
        z.signal.abort(OPERATOR_CANCEL, urgent=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, 30)
        await runner.settle()


async def test_the_held_folder_itself_turned_into_a_symlink_is_refused(
    docker, tmp_path, host_label
) -> None:
    root, a, c, gate, runner = setup(tmp_path, docker)
    y = make_ctx(tmp_path, host_label, ["true"], kind="local", folder=str(c))
    y.folder = await resolved(gate, c)
    os.rename(c, root / "c-old")
    os.symlink(a, c)  # the checked path now leads elsewhere
    result = await runner.run(y)
    assert (result.started, result.refusal) == (False, MOUNT_MISMATCH)
    assert await mounts(docker, host_label) == []
