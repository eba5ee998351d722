"""The post-start mount check: what the engine says it mounted against the folder checked.

A real engine mounts what it is given, so a mismatch is scripted here (httpx.MockTransport);
the matching path on the real engine is in test_job_user.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dispatch.runners.base import classify
from dispatch.runners.docker import DockerRunner, DockerSettings
from dispatch.runners.docker.mounts import bind_mount, mismatch
from tests.support.docker import make_ctx
from tests.support.engine import FakeEngine, chunked, reply, streamed

pytestmark = pytest.mark.anyio

WORK = "/work"


def _bind(source: str, **fields: Any) -> dict[str, Any]:
    return {"Type": "bind", "Source": source, "Destination": WORK, "RW": True, **fields}


@pytest.mark.parametrize(
    ("mounts", "why"),
    [
        ([_bind("/srv/a")], ""),
        ([_bind("/srv/a"), {"Type": "volume", "Destination": "/data"}], ""),  # an image VOLUME
        ([], "0 mounts at /work"),
        ([_bind("/srv/a"), _bind("/srv/a")], "2 mounts at /work"),
        ([_bind("/srv/b")], "/work is bound from '/srv/b', not the checked folder"),
        ([_bind("/srv/a", Type="volume")], "a volume mount at /work, not a bind"),
        ([_bind("/srv/a", RW=False)], "/work is not writable"),
    ],
)
def test_mismatch_names_what_differs(mounts, why) -> None:
    assert mismatch({"Mounts": mounts}, "/srv/a", WORK) == why


def test_the_bind_asked_for_is_a_writable_bind_of_the_path() -> None:
    assert bind_mount("/srv/a", WORK) == {
        "Type": "bind",
        "Source": "/srv/a",
        "Target": WORK,
        "ReadOnly": False,
    }


def _engine_that_binds(cid: str, source: str) -> tuple[FakeEngine, asyncio.Event]:
    """An engine that reports `source` at the workspace, whatever it was asked to bind, and
    runs the container until it is killed."""
    engine, killed = FakeEngine(), asyncio.Event()

    async def exit_when_killed() -> AsyncIterator[bytes]:
        await killed.wait()
        yield b'{"StatusCode": 137}'

    def kill(request: httpx.Request) -> httpx.Response:
        killed.set()
        return httpx.Response(204)

    info = {"State": {"Running": True}, "Mounts": [_bind(source)]}
    engine.on("POST", "/containers/create", reply(201, {"Id": cid}))
    engine.on("POST", f"/containers/{cid}/wait", streamed(exit_when_killed))
    engine.on("POST", f"/containers/{cid}/start", reply(204))
    engine.on("GET", f"/containers/{cid}/json", reply(200, info))
    engine.on("GET", f"/containers/{cid}/logs", chunked())
    engine.on("POST", f"/containers/{cid}/kill", kill)
    engine.on("DELETE", f"/containers/{cid}", reply(204))
    return engine, killed


def _local_ctx(tmp_path: Path) -> tuple[Any, Path]:
    folder = tmp_path / "repo"
    folder.mkdir()
    os.chown(folder, 1000, 1000)
    return make_ctx(tmp_path, "h1", ["true"], image="img", kind="local", folder=str(folder)), folder


async def test_a_container_holding_another_folder_is_killed_and_refused(tmp_path) -> None:
    engine, killed = _engine_that_binds("c1", "/somewhere/else")
    ctx, folder = _local_ctx(tmp_path)
    runner = DockerRunner(DockerSettings(allowed_roots=(str(tmp_path),)), engine.client())
    result = await runner.run(ctx)
    assert result.started and result.refusal == "mount-mismatch"
    assert classify(result, ctx.abort_reason) == ("policy", "mount-mismatch")  # not retried
    assert killed.is_set()
    created = engine.last("POST", "/containers/create").body["HostConfig"]
    assert created["Mounts"] == [bind_mount(str(folder), WORK)]
    paths = [path.split("/", 2)[-1] for _, path in engine.calls()]
    # killed before any output was followed, and removed
    assert "containers/c1/logs" not in paths
    assert paths[-2:] == ["containers/c1/kill", "containers/c1"]


async def test_a_container_holding_its_folder_runs_on(tmp_path) -> None:
    ctx, folder = _local_ctx(tmp_path)
    engine, killed = _engine_that_binds("c1", str(folder))
    state = {"State": {"Running": False, "ExitCode": 0}, "Mounts": [_bind(str(folder))]}
    engine.on("POST", "/containers/c1/wait", reply(200, {"StatusCode": 0}))
    runner = DockerRunner(DockerSettings(allowed_roots=(str(tmp_path),)), engine.client())
    engine.on("GET", "/containers/c1/json", reply(200, state))
    result = await runner.run(ctx)
    assert (result.exit_code, result.refusal) == (0, "")
    assert not killed.is_set()
