"""Who the container runs as, what it may write, and the defaults it gets, on the real engine.

Tests run as root, so a folder made here belongs to root until a test hands it to a user.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from dispatch.runners.base import classify
from dispatch.runners.docker import NAME_PREFIX, ContainerNotFound, DockerRunner, DockerSettings
from dispatch.runners.docker.user import (
    DEFAULT_USER,
    HOME_DIR,
    TMPFS_OPTIONS,
    home_tmpfs,
    job_user,
)
from tests.support.docker import make_ctx
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

OWNER = 1000


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


def _folder(root: Path, name: str = "repo", owner: int | None = OWNER) -> Path:
    folder = root / name
    folder.mkdir()
    if owner is not None:
        os.chown(folder, owner, owner)
    return folder


def _runner(docker, root: Path, **settings: object) -> DockerRunner:
    return DockerRunner(DockerSettings(allowed_roots=(str(root),), **settings), docker)  # type: ignore[arg-type]


async def test_a_local_job_writes_its_folder_as_the_folders_owner(docker, tmp_path, host_label):
    root = _root(tmp_path)
    folder = _folder(root)
    script = 'echo hi > new.txt && id -u && id -g && echo "$HOME" && touch "$HOME/.rc" && pwd'
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", script], kind="local", folder=str(folder))
    result = await _runner(docker, root).run(ctx)
    assert result.exit_code == 0, ctx.output_path.read_text()
    assert ctx.output_path.read_text() == f"{OWNER}\n{OWNER}\n{HOME_DIR}\n/work\n"
    made = (folder / "new.txt").stat()
    assert (made.st_uid, made.st_gid) == (OWNER, OWNER)
    assert (folder / "new.txt").read_text() == "hi\n"


async def test_the_owner_is_read_from_the_resolved_folder(docker, tmp_path, host_label):
    root = _root(tmp_path)
    folder = _folder(root)
    (root / "link").symlink_to(folder)  # the link itself belongs to root
    ctx = make_ctx(tmp_path, host_label, ["id", "-u"], kind="local", folder=str(root / "link"))
    result = await _runner(docker, root).run(ctx)
    assert result.exit_code == 0 and ctx.output_path.read_text() == f"{OWNER}\n"


async def test_a_folder_owned_by_root_is_refused_before_any_container(docker, tmp_path, host_label):
    root = _root(tmp_path)
    folder = _folder(root, owner=None)
    runner = _runner(docker, root)
    ctx = make_ctx(tmp_path, host_label, ["true"], kind="local", folder=str(folder))
    result = await runner.run(ctx)
    assert not result.started and result.refusal == "job-user-root"
    assert classify(result, ctx.abort_reason) == ("policy", "job-user-root")
    assert await runner.preflight(ctx.job) == "job-user-root"
    with pytest.raises(ContainerNotFound):
        await docker.inspect(NAME_PREFIX + ctx.job.id)


@pytest.mark.parametrize(("configured", "uid"), [("4321:4321", "4321"), ("0", "0")])
async def test_an_explicit_user_wins_even_root(docker, tmp_path, host_label, configured, uid):
    root = _root(tmp_path)
    folder = _folder(root, owner=None)
    ctx = make_ctx(tmp_path, host_label, ["id", "-u"], kind="local", folder=str(folder))
    result = await _runner(docker, root, user=configured).run(ctx)
    assert result.exit_code == 0 and ctx.output_path.read_text() == f"{uid}\n"


async def test_a_job_without_a_folder_runs_as_nobody_with_a_home(docker, tmp_path, host_label):
    script = 'id -u && touch "$HOME/x" && touch /tmp/x && echo ok'
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", script])
    result = await _runner(docker, _root(tmp_path)).run(ctx)
    assert result.exit_code == 0 and ctx.output_path.read_text() == "65534\nok\n"


async def test_the_job_env_may_set_its_own_home(docker, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", 'echo "$HOME"'], env={"HOME": "/tmp"})
    result = await _runner(docker, _root(tmp_path)).run(ctx)
    assert result.exit_code == 0 and ctx.output_path.read_text() == "/tmp\n"


DEFAULTS = (
    "cat /proc/1/comm; ulimit -n; ulimit -Hn; "
    "touch /etc/x 2>/dev/null && echo root-writable || echo root-read-only; "
    'touch /tmp/x "$HOME/x" && echo scratch-writable; '
    "cp /bin/busybox /tmp/true && /tmp/true && echo tmp-exec"
)


async def test_containers_get_init_nofile_read_only_root_and_scratch(docker, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", DEFAULTS])
    result = await _runner(docker, _root(tmp_path)).run(ctx)
    assert result.exit_code == 0, ctx.output_path.read_text()
    lines = ctx.output_path.read_text().splitlines()
    assert lines == [
        "docker-init",
        "4096",
        "8192",
        "root-read-only",
        "scratch-writable",
        "tmp-exec",
    ]


async def test_the_read_only_root_can_be_turned_off(docker, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", DEFAULTS])
    result = await _runner(docker, _root(tmp_path), user="0", read_only=False).run(ctx)
    assert result.exit_code == 0, ctx.output_path.read_text()
    assert "root-writable" in ctx.output_path.read_text().splitlines()


async def test_the_folder_is_a_bind_of_its_resolved_path_and_the_log_is_bounded(
    docker, tmp_path, host_label
):
    root = _root(tmp_path)
    folder = _folder(root)
    (root / "link").symlink_to(folder)
    ctx = make_ctx(tmp_path, host_label, ["sleep", "60"], kind="local", folder=str(root / "link"))
    task = asyncio.ensure_future(_runner(docker, root).run(ctx))
    info = await _running(docker, NAME_PREFIX + ctx.job.id)
    ctx.abort("job-timeout")
    result = await task
    assert result.refusal == ""  # the mount check found the folder it was given
    hc = info["HostConfig"]
    (mount,) = hc["Mounts"]  # the engine leaves out a ReadOnly of false
    assert (mount["Type"], mount["Source"], mount["Target"]) == ("bind", str(folder), "/work")
    assert not mount.get("ReadOnly")
    assert not hc.get("Binds")
    assert hc["Init"] is True and hc["ReadonlyRootfs"] is True
    assert hc["LogConfig"] == {"Type": "local", "Config": {"max-size": "10485760", "max-file": "3"}}
    assert hc["Ulimits"] == [{"Name": "nofile", "Soft": 4096, "Hard": 8192}]
    assert set(hc["Tmpfs"]) == {"/tmp", HOME_DIR}
    assert f"uid={OWNER},gid={OWNER},mode=0700" in hc["Tmpfs"][HOME_DIR]
    assert info["Config"]["User"] == f"{OWNER}:{OWNER}"


async def _running(docker, name: str) -> dict[str, Any]:
    async def running() -> dict[str, Any]:
        try:
            info = await docker.inspect(name)
        except ContainerNotFound:
            return {}
        return info if info["State"]["Running"] else {}

    return await eventually(running, timeout=10, every=0.05)


@pytest.mark.parametrize(
    ("owner", "configured", "user"),
    [
        ((1000, 1000), None, "1000:1000"),
        ((1000, 0), None, "1000:65534"),  # the root group is not handed out with the folder
        ((0, 1000), None, None),  # root's folder: refused
        ((0, 0), "0", "0"),  # the operator asked for root
        ((1000, 1000), "", ""),  # the image's own USER
    ],
)
def test_the_user_rule(tmp_path, owner, configured, user) -> None:
    os.chown(tmp_path, *owner)
    assert job_user(str(tmp_path), configured) == user
    assert job_user(None, configured) == (DEFAULT_USER if configured is None else configured)


@pytest.mark.parametrize(
    ("user", "owned"),
    [
        ("1000:1000", "uid=1000,gid=1000,mode=0700"),
        ("1000", "uid=1000,mode=0700"),
        ("node", "mode=1777"),  # a name only the image can resolve
        ("1000:staff", "mode=1777"),
        ("", None),  # the image's own user keeps the image's HOME
    ],
)
def test_the_home_belongs_to_the_user(user, owned) -> None:
    options = home_tmpfs(user)
    assert (options and options.removeprefix(TMPFS_OPTIONS + ",")) == owned
