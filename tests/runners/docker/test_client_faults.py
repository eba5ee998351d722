"""The Engine API client's fault paths, through httpx.MockTransport: no engine needed.

Each test says what the client asked (method, path, query, timeout) and what came out: httpx
errors become DockerUnavailable / DockerTimeout, statuses become the DockerError tree
(dispatch/runners/docker/errors.py). The happy paths against a real engine are in test_client.
"""

from __future__ import annotations

import asyncio
import json
import struct

import httpx
import pytest

from dispatch.runners.docker import (
    ContainerConflict,
    ContainerNotFound,
    ContainerNotRunning,
    DockerApiError,
    DockerTimeout,
    DockerUnavailable,
    ImageMissing,
)
from tests.support.engine import API, FakeEngine, chunked, fail, reply

pytestmark = pytest.mark.anyio

GONE = {"message": "No such container: c1"}


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


# -- the transport failing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (httpx.ConnectError, DockerUnavailable),  # refused, or no socket
        (httpx.RemoteProtocolError, DockerUnavailable),  # something that is not HTTP answered
        (httpx.ConnectTimeout, DockerTimeout),
        (httpx.ReadTimeout, DockerTimeout),
    ],
)
async def test_transport_errors_become_docker_unavailable(engine, error, raised) -> None:
    engine.on("GET", "/version", fail(error, "boom"))
    async with engine.client() as client:
        with pytest.raises(DockerUnavailable) as caught:
            await client.connect()
    assert type(caught.value) is raised
    assert "GET /version" in str(caught.value)
    assert engine.calls() == [("GET", "/version")]
    assert client.api_version is None  # a later call negotiates again


async def test_every_call_is_bounded_by_the_clients_timeout(engine) -> None:
    engine.on("GET", "/containers/c1/json", fail(httpx.ReadTimeout))
    async with engine.client(timeout_s=3.0) as client:
        with pytest.raises(DockerTimeout, match="GET /containers/c1/json: no answer in time"):
            await client.inspect("c1")
    sent = engine.last("GET", "/containers/c1/json")
    assert sent.path == f"/v{API}/containers/c1/json"
    assert sent.timeout == {"connect": 3.0, "read": 3.0, "write": 3.0, "pool": 3.0}


# -- version negotiation ---------------------------------------------------------------------


async def test_a_newer_engine_is_spoken_to_in_the_clients_version_once() -> None:
    engine = FakeEngine(api_version="1.47")
    engine.on("GET", "/_ping", reply(200, text="OK"))
    engine.on("GET", "/containers/json", reply(200, []))
    async with engine.client() as client:
        await asyncio.gather(client.list_containers({}), client.list_containers({}))
        assert await client.ping() == "OK"  # unversioned, like /version
        assert client.api_version == API
    assert engine.calls() == [
        ("GET", "/version"),  # negotiated once, though two calls wanted it at the same time
        ("GET", f"/v{API}/containers/json"),
        ("GET", f"/v{API}/containers/json"),
        ("GET", "/_ping"),
    ]


async def test_an_older_engine_speaks_its_own_version() -> None:
    engine = FakeEngine(api_version="1.41")
    engine.on("POST", "/containers/c1/start", reply(204))
    async with engine.client() as client:
        await client.start("c1")
    assert engine.calls()[-1] == ("POST", "/v1.41/containers/c1/start")


@pytest.mark.parametrize(
    "answer",
    [
        reply(200, {"ApiVersion": "1.39"}),  # older than MIN_API
        reply(200, {"ApiVersion": "banana"}),
        reply(200, {"Version": "no ApiVersion"}),
        reply(200, text="<html>a web server</html>"),  # not the Docker API at all
    ],
)
async def test_an_engine_that_cannot_be_spoken_to_is_unavailable(engine, answer) -> None:
    engine.on("GET", "/version", answer)
    async with engine.client() as client:
        with pytest.raises(DockerUnavailable):
            await client.image_inspect("img")
    assert engine.calls() == [("GET", "/version")]  # nothing asked in a version it refused


# -- statuses --------------------------------------------------------------------------------


async def test_404_on_create_is_a_missing_image_and_nothing_is_pulled(engine) -> None:
    engine.on("POST", "/containers/create", reply(404, {"message": "No such image: img:1"}))
    config = {"Image": "img:1", "Cmd": ["true"]}
    async with engine.client() as client:
        with pytest.raises(ImageMissing, match="No such image: img:1"):
            await client.create_container("dispatch-job-j1", config)
    sent = engine.last("POST", "/containers/create")
    assert sent.params == {"name": "dispatch-job-j1"} and sent.body == config
    assert engine.calls() == [("GET", "/version"), ("POST", f"/v{API}/containers/create")]


async def test_create_returns_the_engines_id(engine) -> None:
    engine.on("POST", "/containers/create", reply(201, {"Id": "abc123", "Warnings": []}))
    async with engine.client() as client:
        assert await client.create_container("n", {"Image": "img"}) == "abc123"


async def test_404_on_an_image_is_image_missing(engine) -> None:
    engine.on("GET", "/images/img:1/json", reply(404, {"message": "no such image"}))
    async with engine.client() as client:
        with pytest.raises(ImageMissing):
            await client.image_inspect("img:1")


async def test_404_on_a_container_is_container_not_found(engine) -> None:
    engine.on("GET", "/containers/c1/json", reply(404, GONE))
    async with engine.client() as client:
        with pytest.raises(ContainerNotFound, match="No such container: c1"):
            await client.inspect("c1")


async def test_409_is_a_conflict(engine) -> None:
    name_in_use = {"message": 'Conflict. The container name "/n" is already in use'}
    engine.on("POST", "/containers/create", reply(409, name_in_use))
    async with engine.client() as client:
        with pytest.raises(ContainerConflict, match="already in use"):
            await client.create_container("n", {"Image": "img"})


@pytest.mark.parametrize(
    ("answer", "status", "message"),
    [
        (reply(500, {"message": "driver failed"}), 500, "driver failed"),
        (reply(500, text="plain text trouble"), 500, "plain text trouble"),
        (reply(503), 503, "Service Unavailable"),  # no body: the reason phrase
    ],
)
async def test_other_statuses_are_api_errors(engine, answer, status, message) -> None:
    engine.on("POST", "/containers/c1/start", answer)
    async with engine.client() as client:
        with pytest.raises(DockerApiError) as caught:
            await client.start("c1")
    assert (caught.value.status, caught.value.message) == (status, message)


async def test_304_already_where_the_caller_wanted_it_is_success(engine) -> None:
    engine.on("POST", "/containers/c1/start", reply(304))
    engine.on("POST", "/containers/c1/stop", reply(304))
    async with engine.client() as client:
        await client.start("c1")  # already started
        assert await client.stop("c1", grace_s=1) is False  # already stopped: not by this stop


async def test_a_success_that_is_not_json_is_unavailable(engine) -> None:
    engine.on("GET", "/containers/c1/json", reply(200, text="not json"))
    async with engine.client() as client:
        with pytest.raises(DockerUnavailable, match="not JSON"):
            await client.inspect("c1")


# -- stop, kill, remove ----------------------------------------------------------------------


async def test_stop_sends_whole_seconds_and_waits_the_grace_beyond_its_timeout(engine) -> None:
    engine.on("POST", "/containers/c1/stop", reply(204))
    async with engine.client(timeout_s=5.0) as client:
        await client.stop("c1", grace_s=1.2)
    sent = engine.last("POST", "/containers/c1/stop")
    assert sent.params == {"t": "2"}  # rounded up: never less grace than asked
    assert sent.timeout["read"] == 2 + 5.0  # the engine answers only after the grace


async def test_a_stop_that_hangs_past_its_timeout_is_a_docker_timeout(engine) -> None:
    engine.on("POST", "/containers/c1/stop", fail(httpx.ReadTimeout))
    async with engine.client() as client:
        with pytest.raises(DockerTimeout, match="POST /containers/c1/stop"):
            await client.stop("c1", grace_s=1)


async def test_kill_of_a_container_already_gone_is_not_found(engine) -> None:
    engine.on("POST", "/containers/c1/kill", reply(404, GONE))
    async with engine.client() as client:
        with pytest.raises(ContainerNotFound):
            await client.kill("c1")
    assert engine.last("POST", "/containers/c1/kill").params == {"signal": "KILL"}


async def test_kill_of_a_container_not_running_is_a_conflict_of_its_own(engine) -> None:
    engine.on("POST", "/containers/c1/kill", reply(409, {"message": "is not running"}))
    async with engine.client() as client:
        with pytest.raises(ContainerNotRunning, match="is not running"):
            await client.kill("c1", "TERM")
    assert engine.last("POST", "/containers/c1/kill").params == {"signal": "TERM"}


async def test_a_kill_refused_for_another_reason_is_a_plain_conflict(engine) -> None:
    engine.on("POST", "/containers/c1/kill", reply(409, {"message": "is restarting"}))
    async with engine.client() as client:
        with pytest.raises(ContainerConflict, match="is restarting") as caught:
            await client.kill("c1")
    assert not isinstance(caught.value, ContainerNotRunning)


async def test_remove_forces_and_takes_the_volumes(engine) -> None:
    engine.on("DELETE", "/containers/c1", reply(404, GONE))
    async with engine.client() as client:
        with pytest.raises(ContainerNotFound):
            await client.remove("c1", force=True)
    assert engine.last("DELETE", "/containers/c1").params == {"force": "1", "v": "1"}


# -- wait and logs: bodies that arrive later --------------------------------------------------


async def test_wait_registers_with_no_read_timeout_and_answers_the_exit_code(engine) -> None:
    engine.on("POST", "/containers/c1/wait", chunked(b'{"StatusCode":', b" 3}"))
    async with engine.client(timeout_s=5.0) as client:
        waiter = await client.wait("c1")
        assert await waiter.result() == 3
    sent = engine.last("POST", "/containers/c1/wait")
    assert sent.params == {"condition": "next-exit"}
    assert sent.timeout == {"connect": 5.0, "read": None, "write": 5.0, "pool": 5.0}


async def test_wait_on_a_container_already_gone_is_not_found(engine) -> None:
    engine.on("POST", "/containers/c1/wait", reply(404, GONE))
    async with engine.client() as client:
        with pytest.raises(ContainerNotFound):
            await client.wait("c1", "not-running")
    assert engine.last("POST", "/containers/c1/wait").params == {"condition": "not-running"}


async def test_wait_that_answers_an_error_is_an_api_error(engine) -> None:
    body = json.dumps({"StatusCode": 0, "Error": {"Message": "container removed"}}).encode()
    engine.on("POST", "/containers/c1/wait", chunked(body))
    async with engine.client() as client:
        waiter = await client.wait("c1")
        with pytest.raises(DockerApiError, match="wait c1: container removed"):
            await waiter.result()


async def test_an_engine_lost_while_waiting_is_unavailable(engine) -> None:
    engine.on("POST", "/containers/c1/wait", chunked(then=httpx.ReadError("reset")))
    async with engine.client() as client:
        waiter = await client.wait("c1")
        with pytest.raises(DockerUnavailable, match="wait c1"):
            await waiter.result()


async def test_a_wait_that_ends_with_no_answer_is_unavailable(engine) -> None:
    engine.on("POST", "/containers/c1/wait", chunked())  # closed cleanly, nothing said
    async with engine.client() as client:
        waiter = await client.wait("c1")
        with pytest.raises(DockerUnavailable, match="without an exit code"):
            await waiter.result()


def _frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


async def test_logs_are_demultiplexed_across_chunk_boundaries(engine) -> None:
    raw = _frame(1, b"out\n") + _frame(2, b"err\n")
    engine.on("GET", "/containers/c1/logs", chunked(raw[:3], raw[3:10], raw[10:]))
    async with engine.client() as client:
        assert [chunk async for chunk in client.logs("c1")] == [b"out\n", b"err\n"]
    params = engine.last("GET", "/containers/c1/logs").params
    assert params == {"stdout": "1", "stderr": "1", "follow": "1"}


async def test_an_engine_lost_while_streaming_logs_is_unavailable(engine) -> None:
    lost = chunked(_frame(1, b"half"), then=httpx.ReadError("reset"))
    engine.on("GET", "/containers/c1/logs", lost)
    async with engine.client() as client:
        got: list[bytes] = []
        with pytest.raises(DockerUnavailable, match="logs c1"):
            async for chunk in client.logs("c1", follow=False):
                got.append(chunk)
    assert got == [b"half"]
    assert engine.last("GET", "/containers/c1/logs").params["follow"] == "0"


# -- listing and events ------------------------------------------------------------------------


async def test_list_filters_by_label(engine) -> None:
    engine.on("GET", "/containers/json", reply(200, [{"Id": "c1"}]))
    async with engine.client() as client:
        assert await client.list_containers({"dispatch.host": "h1"}) == [{"Id": "c1"}]
    params = engine.last("GET", "/containers/json").params
    assert params["all"] == "1"
    assert json.loads(params["filters"]) == {"label": ["dispatch.host=h1"]}


async def test_events_asks_for_a_closed_window_and_reads_json_lines(engine) -> None:
    lines = '{"status": "oom", "id": "c1"}\n\n{"status": "die", "id": "c1"}\n'
    engine.on("GET", "/events", reply(200, text=lines))
    async with engine.client() as client:
        found = await client.events({"container": ["c1"]}, 100.0, 102.5)
    assert [e["status"] for e in found] == ["oom", "die"]
    params = engine.last("GET", "/events").params
    assert (params["since"], params["until"]) == ("100.000", "102.500")
    assert json.loads(params["filters"]) == {"container": ["c1"]}


async def test_a_tcp_host_is_the_base_url(engine) -> None:
    async with engine.client("tcp://10.0.0.5:2375") as client:
        await client.connect()
    async with engine.client("unix:///run/other.sock") as client:
        await client.connect()
    assert [s.url for s in engine.seen] == ["http://10.0.0.5:2375/version", "http://docker/version"]
