"""DockerRunner's fault paths through a scripted engine (httpx.MockTransport): what a real engine
will not do on demand, such as a stop that hangs, or not being there at all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from dispatch.runners.base import classify
from dispatch.runners.docker import LABEL_HOST, LABEL_JOB, NAME_PREFIX, DockerRunner, DockerSettings
from tests.support.docker import make_ctx
from tests.support.engine import API, FakeEngine, chunked, fail, reply, streamed

pytestmark = pytest.mark.anyio


def _runner(engine: FakeEngine) -> DockerRunner:
    return DockerRunner(DockerSettings(), engine.client())


async def test_an_image_not_on_this_host_is_refused_before_anything_runs(tmp_path) -> None:
    engine = FakeEngine()
    engine.on("POST", "/containers/create", reply(404, {"message": "No such image: img:9"}))
    ctx = make_ctx(tmp_path, "h1", ["true"], image="img:9")
    result = await _runner(engine).run(ctx)
    assert not result.started and result.refusal == "image-missing"
    assert classify(result, ctx.abort_reason) == ("policy", "image-missing")
    # the create's 404 was the image check: no pull, and nothing created to remove
    assert engine.calls() == [("GET", "/version"), ("POST", f"/v{API}/containers/create")]
    assert engine.seen[-1].params == {"name": NAME_PREFIX + ctx.job.id}


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ConnectTimeout])
async def test_an_engine_unreachable_at_create_is_an_infra_error_not_a_start(
    tmp_path, error
) -> None:
    engine = FakeEngine()
    engine.on("GET", "/version", fail(error))
    ctx = make_ctx(tmp_path, "h1", ["true"], image="img")
    result = await _runner(engine).run(ctx)
    assert not result.started and result.error == "docker-unavailable" and not result.refusal
    assert classify(result, ctx.abort_reason) == ("infra", "docker-unavailable")
    assert engine.calls() == [("GET", "/version")]


def _engine_whose_stop_hangs(cid: str) -> tuple[FakeEngine, asyncio.Event]:
    """An engine that runs the container until it is killed: its stop never answers."""
    engine, started, killed = FakeEngine(), asyncio.Event(), asyncio.Event()

    async def exit_when_killed() -> AsyncIterator[bytes]:
        await killed.wait()
        yield b'{"StatusCode": 137}'

    def start(request: httpx.Request) -> httpx.Response:
        started.set()
        return httpx.Response(204)

    def kill(request: httpx.Request) -> httpx.Response:
        killed.set()
        return httpx.Response(204)

    state = {"OOMKilled": False, "StartedAt": "2024-01-01T00:00:00Z"}
    state["FinishedAt"] = "2024-01-01T00:00:05Z"
    engine.on("POST", "/containers/create", reply(201, {"Id": cid}))
    engine.on("POST", f"/containers/{cid}/wait", streamed(exit_when_killed))
    engine.on("POST", f"/containers/{cid}/start", start)
    engine.on("GET", f"/containers/{cid}/logs", chunked())  # no output
    engine.on("POST", f"/containers/{cid}/stop", fail(httpx.ReadTimeout))
    engine.on("POST", f"/containers/{cid}/kill", kill)
    engine.on("GET", f"/containers/{cid}/json", reply(200, {"State": state}))
    engine.on("GET", "/events", reply(200, text=""))  # no oom event
    engine.on("DELETE", f"/containers/{cid}", reply(204))
    return engine, started


async def test_an_aborted_run_whose_stop_hangs_is_killed_and_removed(tmp_path) -> None:
    engine, started = _engine_whose_stop_hangs("c1")
    ctx = make_ctx(tmp_path, "h1", ["sleep", "60"], image="img")
    run = asyncio.ensure_future(_runner(engine).run(ctx))
    await asyncio.wait_for(started.wait(), 5)
    ctx.abort("operator-cancel")
    result = await asyncio.wait_for(run, 5)
    assert result.started and result.exit_code == 137 and result.kill == "stop-timeout"
    asked = [c for c in engine.calls() if not c[1].endswith("/logs")]  # logs run alongside
    v = f"/v{API}"
    assert asked == [
        ("GET", "/version"),
        ("POST", f"{v}/containers/create"),
        ("POST", f"{v}/containers/c1/wait"),  # registered before the start
        ("POST", f"{v}/containers/c1/start"),
        ("GET", f"{v}/containers/c1/json"),  # exited on its own meanwhile? (no: still running)
        ("POST", f"{v}/containers/c1/stop"),  # hung past its timeout...
        ("POST", f"{v}/containers/c1/kill"),  # ...so killed outright
        ("GET", f"{v}/containers/c1/json"),  # was it an OOM?
        ("GET", f"{v}/events"),
        ("DELETE", f"{v}/containers/c1"),
    ]
    assert engine.last("POST", "/stop").params == {"t": "1"}  # the context's grace
    assert engine.last("POST", "/kill").params == {"signal": "KILL"}
    assert engine.last("DELETE", "/containers/c1").params == {"force": "1", "v": "1"}


async def test_reap_removes_what_no_live_claim_owns() -> None:
    engine = FakeEngine()
    left = [
        {
            "Id": "c1",
            "Names": ["/dispatch-job-j1"],
            "State": "running",
            "Labels": {LABEL_JOB: "j1"},
        },
        {"Id": "c2", "Names": ["/dispatch-job-j2"], "State": "exited", "Labels": {LABEL_JOB: "j2"}},
    ]
    engine.on("GET", "/containers/json", reply(200, left))
    engine.on("POST", "/containers/c1/stop", reply(204))
    engine.on("DELETE", "/containers/c1", reply(204))
    assert await _runner(engine).reap("h1", lambda job, fence: job == "j2")
    filters = engine.last("GET", "/containers/json").params["filters"]
    assert f"{LABEL_HOST}=h1" in filters
    assert engine.calls()[2:] == [
        ("POST", f"/v{API}/containers/c1/stop"),  # running: stopped first
        ("DELETE", f"/v{API}/containers/c1"),  # j2's claim is live: left alone
    ]


async def test_reap_cannot_tell_when_the_engine_cannot_be_listed() -> None:
    engine = FakeEngine()
    engine.on("GET", "/containers/json", fail(httpx.ConnectError))
    assert not await _runner(engine).reap("h1", lambda job, fence: False)


async def test_reap_is_not_done_while_a_leftover_could_not_be_removed() -> None:
    engine = FakeEngine()
    left = [{"Id": "c1", "Names": ["/dispatch-job-j1"], "State": "exited", "Labels": {}}]
    engine.on("GET", "/containers/json", reply(200, left))
    engine.on("DELETE", "/containers/c1", reply(500, {"message": "device or resource busy"}))
    # listed, but its container may still hold what the job held: the leases must stay
    assert not await _runner(engine).reap("h1", lambda job, fence: False)
    assert engine.calls()[-1] == ("DELETE", f"/v{API}/containers/c1")
