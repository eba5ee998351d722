"""An engine that goes away mid-run and comes back, scripted (httpx.MockTransport): the run is
re-adopted when its container outlived the restart, and never believed when it did not.

tests/faults/test_engine.py restarts a real dockerd for the same paths.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from dispatch.runners.base import RunResult, classify
from dispatch.runners.docker import DockerRunner, DockerSettings
from tests.support.docker import make_ctx
from tests.support.engine import API, Answer, FakeEngine, chunked, fail, reply, streamed

pytestmark = pytest.mark.anyio

RUNNING = {"State": {"Running": True, "Status": "running"}}
EXITED_0 = {"State": {"Running": False, "Status": "exited", "ExitCode": 0}}


def frame(payload: bytes) -> bytes:
    return struct.pack(">BxxxI", 1, len(payload)) + payload


def sequence(*answers: Answer) -> Answer:
    """Each answer in turn, the last one for every request after."""
    left = list(answers)

    def answer(request: httpx.Request) -> httpx.Response:
        now = left.pop(0) if len(left) > 1 else left[0]
        response = now(request)
        assert isinstance(response, httpx.Response)
        return response

    return answer


def gone() -> Answer:
    return fail(httpx.ConnectError, "no such file: docker.sock")


def engine_for(cid: str) -> FakeEngine:
    engine = FakeEngine()
    engine.on("POST", "/containers/create", reply(201, {"Id": cid}))
    engine.on("POST", f"/containers/{cid}/start", reply(204))
    engine.on("GET", "/events", reply(200, text=""))
    engine.on("DELETE", f"/containers/{cid}", reply(204))
    return engine


def breaks_after_first_output() -> tuple[Answer, Answer]:
    """A log stream that gives `before` and then breaks, and a wait that breaks once that
    output was taken: the engine went away mid-run, after some output."""
    taken = asyncio.Event()

    async def logs() -> AsyncIterator[bytes]:
        yield frame(b"before\n")
        taken.set()  # resumed: the runner asked for more, so `before` is written
        raise httpx.ReadError("engine gone")

    async def wait() -> AsyncIterator[bytes]:
        await taken.wait()
        raise httpx.ReadError("engine gone")
        yield b""  # a generator, never reached

    return streamed(logs), streamed(wait)


async def run(engine: FakeEngine, tmp_path: Path, **settings: float) -> tuple[RunResult, Path]:
    runner = DockerRunner(DockerSettings(**settings), engine.client())  # type: ignore[arg-type]
    ctx = make_ctx(tmp_path, "h1", ["sh", "-c", "work"], image="img")
    result = await asyncio.wait_for(runner.run(ctx), 10)
    return result, ctx.output_path


async def test_a_container_that_outlived_the_restart_is_readopted(tmp_path: Path) -> None:
    engine = engine_for("c1")
    first_logs, first_wait = breaks_after_first_output()
    engine.on(
        "GET",
        "/containers/c1/logs",
        sequence(first_logs, chunked(frame(b"before\n"), frame(b"after\n"))),
    )
    engine.on("POST", "/containers/c1/wait", sequence(first_wait, reply(200, {"StatusCode": 0})))
    engine.on(
        "GET",
        "/containers/c1/json",
        sequence(gone(), gone(), reply(200, RUNNING), reply(200, EXITED_0)),
    )
    result, output = await run(engine, tmp_path)
    assert (result.started, result.exit_code, result.error) == (True, 0, "")
    assert classify(result, "") == ("completed", "")
    assert output.read_bytes() == b"before\nafter\n"  # each byte once, across two streams
    waits = [s.params for s in engine.seen if s.path.endswith("/wait")]
    assert waits == [{"condition": "next-exit"}, {"condition": "not-running"}]
    v = f"/v{API}/containers/c1"
    after_start = [c for c in engine.calls() if not c[1].endswith("/logs")][4:]
    assert after_start == [
        ("GET", f"{v}/json"),  # the engine is away...
        ("GET", f"{v}/json"),
        ("GET", f"{v}/json"),  # ...and back: still running
        ("POST", f"{v}/wait"),  # not-running
        ("GET", f"{v}/json"),  # the exit, confirmed
        ("DELETE", v),
    ]


async def test_a_container_the_restart_stopped_is_infra_never_completed(tmp_path: Path) -> None:
    engine = engine_for("c1")
    first_logs, first_wait = breaks_after_first_output()
    engine.on("GET", "/containers/c1/logs", first_logs)
    engine.on("POST", "/containers/c1/wait", first_wait)
    engine.on(
        "GET", "/containers/c1/json", sequence(gone(), reply(200, EXITED_0))
    )  # exit 0 on TERM
    result, output = await run(engine, tmp_path)
    assert result.started and result.exit_code is None
    assert classify(result, "") == ("infra", "engine-restarted")
    assert output.read_bytes() == b"before\n"
    assert [s.params for s in engine.seen if s.path.endswith("/wait")] == [
        {"condition": "next-exit"}
    ]


async def test_an_exit_the_engine_cannot_confirm_is_not_believed(tmp_path: Path) -> None:
    """The wait answers (dockerd stopping the container as it shuts down), then the engine is
    gone; once back, the container is stopped: nobody can say the job ended on its own."""
    engine = engine_for("c1")
    engine.on("GET", "/containers/c1/logs", chunked())
    engine.on("POST", "/containers/c1/wait", reply(200, {"StatusCode": 0}))
    engine.on("GET", "/containers/c1/json", sequence(gone(), reply(200, EXITED_0)))
    result, _ = await run(engine, tmp_path)
    assert classify(result, "") == ("infra", "engine-restarted")


async def test_a_container_removed_while_the_engine_was_away_is_lost(tmp_path: Path) -> None:
    engine = engine_for("c1")
    engine.on("GET", "/containers/c1/logs", chunked())
    engine.on("POST", "/containers/c1/wait", chunked(then=httpx.ReadError("engine gone")))
    engine.on("GET", "/containers/c1/json", reply(404, {"message": "No such container: c1"}))
    engine.on("DELETE", "/containers/c1", reply(404, {"message": "No such container: c1"}))
    result, _ = await run(engine, tmp_path)
    assert classify(result, "") == ("infra", "engine-restarted")


async def test_an_engine_that_stays_away_past_the_wait_is_unavailable(tmp_path: Path) -> None:
    engine = engine_for("c1")
    engine.on("GET", "/containers/c1/logs", chunked())
    engine.on("POST", "/containers/c1/wait", chunked(then=httpx.ReadError("engine gone")))
    engine.on("GET", "/containers/c1/json", gone())
    engine.on("DELETE", "/containers/c1", gone())  # logged; the boot reaper removes it later
    result, _ = await run(engine, tmp_path, engine_wait_s=0.3)
    assert result.started and classify(result, "") == ("infra", "docker-unavailable")
