"""An abort that lands after the container exited on its own but before the runner read the exit
(issue 25, item 5): the run ended by its own exit code, never `stopped` nor `docker-error`.

The seam is the real client with the runner's exit wait held: the engine has the exit, the
runner has not seen it, and the wait is let go only once the runner has answered the abort
with an engine call of its own (a look, a stop or a kill). No sleeps: every condition polled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dispatch.reasons import LOCK_LOST
from dispatch.runners.base import RunContext, classify
from dispatch.runners.docker import (
    NAME_PREFIX,
    ContainerNotFound,
    DockerClient,
    DockerRunner,
    DockerSettings,
    ExitWait,
)
from tests.support.docker import make_ctx
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


class _HeldWait(ExitWait):
    """The engine's exit wait, answered to the runner only once `release` is set."""

    def __init__(self, inner: ExitWait, release: asyncio.Event) -> None:
        self._inner, self._release = inner, release

    async def result(self) -> int:
        await self._release.wait()
        return await self._inner.result()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _HeldClient(DockerClient):
    """The real client; its waits are held until an engine call made after `armed` returned."""

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.armed, self.release = asyncio.Event(), asyncio.Event()
        self.after_abort: list[str] = []

    async def wait(self, container: str, condition: str = "next-exit") -> ExitWait:
        return _HeldWait(await super().wait(container, condition), self.release)

    async def inspect(self, container: str, *, fresh: bool = False) -> dict[str, Any]:
        try:
            return await super().inspect(container, fresh=fresh)
        finally:
            self._answered("inspect")

    async def stop(self, container: str, grace_s: float) -> bool:
        try:
            return await super().stop(container, grace_s)
        finally:
            self._answered("stop")

    async def kill(self, container: str, signal: str = "KILL") -> None:
        try:
            await super().kill(container, signal)
        finally:
            self._answered("kill")

    def _answered(self, call: str) -> None:
        if self.armed.is_set():
            self.after_abort.append(call)
            self.release.set()


async def _exited(docker: DockerClient, ctx: RunContext) -> dict[str, Any]:
    """The container's State once the engine reports it exited (the run task drives it)."""

    async def exited() -> dict[str, Any]:
        try:
            state: dict[str, Any] = (await docker.inspect(NAME_PREFIX + ctx.job.id))["State"]
        except ContainerNotFound:
            return {}
        return state if state["Status"] == "exited" else {}

    return await eventually(exited, timeout=10, every=0.02)


@pytest.mark.parametrize("urgent", [False, True], ids=["stop", "urgent-kill"])
async def test_an_abort_after_the_exit_is_the_runs_own_exit(
    docker_host, docker, tmp_path, host_label, urgent
) -> None:
    """Before the fix: the stop answered 304 and counted as a stop (handed back, run again),
    or the urgent kill answered 409 and the run became `docker-error`."""
    held = _HeldClient(docker_host)
    async with held:
        runner = DockerRunner(DockerSettings(), held)
        ctx = make_ctx(tmp_path, host_label, ["sh", "-c", "echo done"])
        task = asyncio.ensure_future(runner.run(ctx))
        state = await _exited(docker, ctx)
        assert state["ExitCode"] == 0 and not task.done()  # the runner has not seen it
        held.armed.set()
        ctx.signal.abort(LOCK_LOST, urgent=urgent)
        result = await asyncio.wait_for(task, 30)
    assert held.after_abort  # the runner did answer the abort before it saw the exit
    assert (result.started, result.exit_code, result.error) == (True, 0, "")
    assert not result.stopped and result.kill is None
    assert classify(result, "") == ("completed", "")


async def test_an_urgent_kill_of_an_exited_container_is_no_stop_and_no_error(
    docker_host, docker, image, tmp_path, host_label
) -> None:
    """The runner's stop step on a container that exited already, with the urgent kill
    answered (409, not running) before the graceful stop is even sent (304)."""
    ctx = make_ctx(tmp_path, host_label, ["true"])
    kill_answered = asyncio.Event()

    class _StopAfterKill(DockerClient):
        async def stop(self, container: str, grace_s: float) -> bool:
            await kill_answered.wait()
            return await super().stop(container, grace_s)

        async def kill(self, container: str, signal: str = "KILL") -> None:
            try:
                await super().kill(container, signal)
            finally:
                kill_answered.set()

    cid = await docker.create_container(NAME_PREFIX + ctx.job.id, {"Image": image, "Cmd": ["true"]})
    try:
        waiter = await docker.wait(cid, "next-exit")
        await docker.start(cid)
        assert await waiter.result() == 0
        async with _StopAfterKill(docker_host) as client:
            ctx.signal.abort(LOCK_LOST, urgent=True)
            stopped = await DockerRunner(DockerSettings(), client)._stop(cid, ctx)
        assert kill_answered.is_set()
        assert stopped is False  # neither the kill nor the stop ended it: it had exited
    finally:
        await docker.remove(cid, force=True)
