"""DockerRunner against the real engine: exits, kills, output, refusals, aborts, cleanup."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from dispatch.model import Size
from dispatch.reasons import ABORTED_BEFORE_START, LOCK_LOST
from dispatch.runners.base import TRUNCATION_MARK, RunContext, classify
from dispatch.runners.docker import (
    LABEL_HOST,
    NAME_PREFIX,
    ContainerNotFound,
    DockerClient,
    DockerRunner,
    DockerSettings,
)
from tests.support.docker import make_ctx
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

CGROUP_V1 = os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")
SETTINGS = DockerSettings(default_memory="256m", default_cpus=1.0, pids_limit=64)


@pytest.fixture
def runner(docker: DockerClient) -> DockerRunner:
    return DockerRunner(SETTINGS, docker)


def _read(path: str | Path | None) -> bytes:
    return Path(path or "").read_bytes()


async def _leftovers(docker: DockerClient, host: str) -> list[str]:
    return [c["Names"][0] for c in await docker.list_containers({LABEL_HOST: host})]


async def _until_running(docker: DockerClient, ctx: RunContext) -> dict[str, Any]:
    """The container's inspect answer once it runs (the run task is driving it)."""

    async def running() -> dict[str, Any]:
        try:
            info = await docker.inspect(NAME_PREFIX + ctx.job.id)
        except ContainerNotFound:
            return {}
        return info if info["State"]["Running"] else {}

    return await eventually(running, timeout=10, every=0.05)


@pytest.mark.parametrize(
    ("code", "outcome", "reason"),
    [(0, "completed", ""), (2, "policy", "job-refused"), (1, "infra", "exit-1")],
)
async def test_exit_codes_map_to_outcomes(runner, tmp_path, host_label, code, outcome, reason):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", f"echo hello; exit {code}"])
    result = await runner.run(ctx)
    assert result.started and result.exit_code == code and result.kill is None
    assert classify(result, ctx.abort_reason) == (outcome, reason)
    assert _read(result.output) == b"hello\n"
    assert result.container == NAME_PREFIX + ctx.job.id
    assert result.started_ms is not None and result.ended_ms is not None
    assert result.started_ms <= result.ended_ms
    await runner.settle()  # an exited container is removed in the background
    assert await _leftovers(runner.client, host_label) == []


async def test_container_is_hardened_and_labelled(runner, docker, tmp_path, host_label):
    ctx = make_ctx(
        tmp_path, host_label, ["sleep", "60"], env={"API_TOKEN": "s3cret"}, size=Size(cpus=0.5)
    )
    task = asyncio.ensure_future(runner.run(ctx))
    info = await _until_running(docker, ctx)
    ctx.abort("job-timeout")
    await task
    hc, config = info["HostConfig"], info["Config"]
    assert hc["CapDrop"] == ["ALL"] and hc["SecurityOpt"] == ["no-new-privileges"]
    assert hc["PidsLimit"] == 64 and hc["Memory"] == 256 * 1024**2
    assert hc["NanoCpus"] == 500_000_000
    assert hc["RestartPolicy"]["Name"] == "no" and hc["AutoRemove"] is False
    assert config["User"] == "65534:65534"
    assert "API_TOKEN=s3cret" in config["Env"]
    assert config["Labels"] == {
        "dispatch.host": host_label,
        "dispatch.job": ctx.job.id,
        "dispatch.attempt": "1",
        "dispatch.fence": "7",
    }


async def test_sigterm_ignored_is_killed_after_grace(runner, docker, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", "trap '' TERM; echo trapped; sleep 60"])
    task = asyncio.ensure_future(runner.run(ctx))
    await _until_running(docker, ctx)

    async def trapped() -> bool:  # running is not yet trapped: a TERM before it ends sh (143)
        return ctx.output_path.exists() and b"trapped" in ctx.output_path.read_bytes()

    await eventually(trapped, timeout=10)
    began = time.monotonic()
    ctx.abort("job-timeout")
    result = await task
    assert time.monotonic() - began >= ctx.grace_s
    assert result.exit_code == 137 and result.kill == "stop-timeout"
    assert classify(result, "") == ("infra", "stop-timeout")
    await runner.settle()
    assert await _leftovers(docker, host_label) == []


async def test_operator_cancel_stops_the_container(runner, docker, tmp_path, host_label):
    script = "trap 'exit 143' TERM; sleep 60 & wait"
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", script])
    ctx.grace_s = 10.0
    task = asyncio.ensure_future(runner.run(ctx))
    await _until_running(docker, ctx)
    began = time.monotonic()
    ctx.abort("operator-cancel")
    result = await task
    assert time.monotonic() - began < ctx.grace_s  # SIGTERM sufficed: no wait for the grace
    assert result.exit_code == 143 and result.kill is None
    assert classify(result, ctx.abort_reason) == ("cancelled", "operator-cancel")
    await runner.settle()
    assert await _leftovers(docker, host_label) == []


async def test_over_memory_is_oom(runner, tmp_path, host_label):
    # tail keeps the whole newline-free stream in memory, far past the 32 MiB limit.
    command = ["sh", "-c", "head -c 300m /dev/zero | tail"]
    ctx = make_ctx(tmp_path, host_label, command, size=Size(memory="32m"))
    result = await runner.run(ctx)
    assert result.exit_code == 137
    assert result.kill in ("oom", "sigkill")  # sigkill where the engine cannot tell
    if CGROUP_V1:
        assert result.kill == "oom"  # cgroup v1 reports it reliably


async def test_output_over_cap_is_truncated_and_marked(runner, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", "yes | head -c 100000"])
    ctx.output_cap = 1000
    result = await runner.run(ctx)
    assert result.exit_code == 0 and result.truncated
    data = _read(ctx.output_path)
    assert data == b"y\n" * 500 + TRUNCATION_MARK


async def test_env_reaches_the_job(runner, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", 'echo "$GREETING"'], env={"GREETING": "hi"})
    result = await runner.run(ctx)
    assert result.exit_code == 0 and _read(ctx.output_path) == b"hi\n"


async def test_missing_image_is_refused_before_any_container(runner, docker, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["true"], image="dispatch-test:no-such-tag")
    result = await runner.run(ctx)
    assert not result.started and result.refusal == "image-missing"
    assert await runner.preflight(ctx.job) == "image-missing"
    assert classify(result, "") == ("policy", "image-missing")
    with pytest.raises(ContainerNotFound):
        await docker.inspect(NAME_PREFIX + ctx.job.id)


async def test_unreachable_engine_is_docker_unavailable(tmp_path, host_label):
    async with DockerClient(f"unix://{tmp_path}/none.sock", timeout_s=2) as client:
        runner = DockerRunner(SETTINGS, client)
        result = await runner.run(make_ctx(tmp_path, host_label, ["true"]))
    assert not result.started and result.error == "docker-unavailable"


def _folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "repo").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    for p in (tmp_path, root, root / "repo"):
        p.chmod(0o755)
    os.chown(root / "repo", 65534, 65534)  # the container runs as the folder's owner
    (root / "repo" / "marker").write_text("inside\n")
    return root, root / "repo", outside


async def test_folder_outside_allowed_roots_is_refused(docker, tmp_path, host_label):
    root, repo, outside = _folders(tmp_path)
    runner = DockerRunner(DockerSettings(allowed_roots=(str(root),)), docker)
    for folder in (outside, root / "escape", Path("/etc")):
        ctx = make_ctx(tmp_path, host_label, ["true"], kind="local", folder=str(folder))
        result = await runner.run(ctx)
        assert not result.started and result.refusal == "folder-not-allowed", folder
        assert await runner.preflight(ctx.job) == "folder-not-allowed"
    ctx = make_ctx(tmp_path, host_label, ["cat", "marker"], kind="local", folder=str(repo))
    assert await runner.preflight(ctx.job) == ""
    result = await runner.run(ctx)
    assert result.exit_code == 0 and _read(ctx.output_path) == b"inside\n"


async def test_cancelled_run_still_removes_its_container(runner, docker, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sleep", "60"])
    task = asyncio.ensure_future(runner.run(ctx))
    await _until_running(docker, ctx)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await runner.settle()
    assert await _leftovers(docker, host_label) == []


def hold_removals(client: DockerClient) -> asyncio.Event:
    """Each container removal of `client` waits for the event, then goes on as it would."""
    remove, removing = client.remove, asyncio.Event()

    async def held(cid: str, *, force: bool = False) -> None:
        await removing.wait()
        await remove(cid, force=force)

    client.remove = held  # type: ignore[method-assign,assignment]
    return removing


async def test_a_run_that_exited_returns_before_its_container_is_removed(
    runner, docker, tmp_path, host_label
):
    """Its process and mounts are gone with the exit: the run's holds do not wait for the
    engine's cleanup, which `settle` waits for. The removal is held open with an event."""
    removing = hold_removals(runner.client)
    result = await asyncio.wait_for(runner.run(make_ctx(tmp_path, host_label, ["true"])), 30)
    assert result.exit_code == 0
    assert len(await _leftovers(docker, host_label)) == 1  # exited, not yet removed
    removing.set()
    await runner.settle()
    assert await _leftovers(docker, host_label) == []


async def test_a_client_closed_meanwhile_still_removes_the_exited_container(
    docker, docker_host, tmp_path, host_label, monkeypatch
):
    """The removal goes on after the run's result; closing the client waits for it rather
    than cut it off mid-call (held open with an event)."""
    client = DockerClient(docker_host)
    removing = hold_removals(client)
    http_closed = asyncio.Event()
    close_http = client._http.aclose

    async def recorded_close() -> None:
        http_closed.set()
        await close_http()

    monkeypatch.setattr(client._http, "aclose", recorded_close)
    result = await DockerRunner(SETTINGS, client).run(make_ctx(tmp_path, host_label, ["true"]))
    assert result.exit_code == 0
    closing = asyncio.ensure_future(client.aclose())
    await asyncio.sleep(0)  # its first step: a close that did not wait has closed the session
    assert not http_closed.is_set() and not closing.done()
    removing.set()
    await asyncio.wait_for(closing, 30)
    assert await _leftovers(docker, host_label) == []


async def test_hundred_true_runs_in_a_row(runner, docker, tmp_path, host_label):
    codes = []
    for _ in range(100):
        result = await runner.run(make_ctx(tmp_path, host_label, ["true"]))
        codes.append(result.exit_code)
    assert codes == [0] * 100
    await runner.settle()
    assert await _leftovers(docker, host_label) == []


async def test_a_full_disk_loses_the_output_not_the_run(runner, tmp_path, host_label):
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", "echo hi; exit 0"])
    ctx.output_path = Path("/dev/full")  # every write: ENOSPC
    result = await runner.run(ctx)
    assert (result.exit_code, result.output_lost) == (0, True)
    assert classify(result, ctx.abort_reason) == ("completed", "")


async def test_a_claim_judged_lost_at_the_start_never_starts_its_container(
    runner, docker, tmp_path, host_label
):
    """The last look happens after the create, just before the start (a daemon frozen while
    creating): the container never runs and is removed."""
    ctx = make_ctx(tmp_path, host_label, ["sh", "-c", f"touch {tmp_path}/ran"])
    looked: list[bool] = []

    def judge() -> None:
        looked.append(True)
        ctx.signal.abort(LOCK_LOST, urgent=True)

    ctx.signal.judged_by(judge)
    result = await runner.run(ctx)
    assert looked and not result.started
    assert result.error == ABORTED_BEFORE_START
    assert await _leftovers(docker, host_label) == []
