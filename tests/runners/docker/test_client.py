"""The Engine API client against the real engine."""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path
from typing import Any

import pytest

from dispatch.errors import ConfigError
from dispatch.runners.docker import (
    ContainerConflict,
    ContainerNotFound,
    ContainerNotRunning,
    DockerClient,
    DockerUnavailable,
    ImageMissing,
)
from dispatch.runners.docker.client import MAX_API, negotiate
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


def test_negotiate_caps_newer_engines_and_refuses_old_ones() -> None:
    assert negotiate({"ApiVersion": "1.99"}) == f"{MAX_API[0]}.{MAX_API[1]}"
    assert negotiate({"ApiVersion": "1.41"}) == "1.41"
    with pytest.raises(DockerUnavailable):
        negotiate({"ApiVersion": "1.25"})
    with pytest.raises(DockerUnavailable):
        negotiate({})


def test_unsupported_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        DockerClient("ssh://somewhere")


async def test_unreachable_socket_is_unavailable(tmp_path: Path) -> None:
    async with DockerClient(f"unix://{tmp_path}/none.sock", timeout_s=2) as client:
        with pytest.raises(DockerUnavailable):
            await client.connect()


async def test_connect_negotiates_and_pings(docker: DockerClient) -> None:
    version = await docker.connect()
    assert docker.api_version == version
    assert tuple(int(p) for p in version.split(".")) >= (1, 40)
    assert await docker.ping() == "OK"


async def test_missing_things_raise_their_own_errors(docker: DockerClient) -> None:
    with pytest.raises(ImageMissing):
        await docker.image_inspect("dispatch-test:no-such-tag")
    with pytest.raises(ContainerNotFound):
        await docker.inspect(f"no-such-{uuid.uuid4().hex}")


async def test_a_fresh_connection_builds_no_tls_context_of_its_own(
    docker: DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The State after every exit is asked on a fresh connection: a TLS context built for it
    (the CA bundle read, 20-40 ms of CPU on the loop) is never used on the engine's plain HTTP."""
    await docker.connect()
    built: list[object] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    with pytest.raises(ContainerNotFound):
        await docker.inspect(f"no-such-{uuid.uuid4().hex}", fresh=True)
    assert built == []


async def test_container_lifecycle(docker: DockerClient, image: str, host_label: str) -> None:
    name = f"dispatch-client-{uuid.uuid4().hex[:10]}"
    config = {
        "Image": image,
        "Cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"],
        "Labels": {"dispatch.host": host_label},
    }
    cid = await docker.create_container(name, config)
    try:
        with pytest.raises(ContainerConflict):
            await docker.create_container(name, config)
        listed = await docker.list_containers({"dispatch.host": host_label})
        assert [c["Id"] for c in listed] == [cid]
        waiter = await docker.wait(cid, "next-exit")
        await docker.start(cid)
        assert await waiter.result() == 3
        chunks = [c async for c in docker.logs(cid, follow=True)]
        assert sorted(b"".join(chunks).split()) == [b"err", b"out"]  # two streams, no order
        assert (await docker.inspect(cid))["State"]["ExitCode"] == 3
    finally:
        await docker.remove(cid, force=True)
    with pytest.raises(ContainerNotFound):
        await docker.inspect(cid)


async def test_stop_kills_after_the_grace(docker: DockerClient, image: str) -> None:
    config = {"Image": image, "Cmd": ["sh", "-c", "trap '' TERM; echo trapped; sleep 60"]}
    cid = await docker.create_container(f"dispatch-client-{uuid.uuid4().hex[:10]}", config)
    try:
        waiter = await docker.wait(cid)
        await docker.start(cid)

        async def trapped() -> bool:  # started is not yet trapped: a TERM before it ends sh
            return b"trapped" in b"".join([c async for c in docker.logs(cid, follow=False)])

        await eventually(trapped, timeout=10)
        assert await docker.stop(cid, grace_s=1) is True  # this stop ended it
        assert await waiter.result() == 137
        assert await docker.stop(cid, grace_s=1) is False  # already stopped: 304, not an error
    finally:
        await docker.remove(cid, force=True)


async def test_an_exited_container_says_so_to_a_stop_and_a_kill(
    docker: DockerClient, image: str
) -> None:
    """A stop answers "already stopped" (304), a kill "not running" (409): each told apart
    from a stop that did stop it and from every other conflict."""
    name = f"dispatch-client-{uuid.uuid4().hex[:10]}"
    cid = await docker.create_container(name, {"Image": image, "Cmd": ["true"]})
    try:
        waiter = await docker.wait(cid)
        await docker.start(cid)
        assert await waiter.result() == 0
        assert await docker.stop(cid, grace_s=1) is False
        with pytest.raises(ContainerNotRunning, match="is not running"):
            await docker.kill(cid)
        with pytest.raises(ContainerConflict) as other:  # the name in use: not "not running"
            await docker.create_container(name, {"Image": image, "Cmd": ["true"]})
        assert not isinstance(other.value, ContainerNotRunning)
    finally:
        await docker.remove(cid, force=True)
