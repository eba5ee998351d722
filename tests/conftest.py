"""Shared fixtures: a real redis-server (started here on a free port unless
DISPATCH_TEST_REDIS_URL names one), an anyio backend on uvloop, and the log captured."""

from __future__ import annotations

import io
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from dispatch.log import log
from tests.support.redis_server import start_redis_server

pytest_plugins = ["tests.support.docker"]


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, bool]]:
    return ("asyncio", {"use_uvloop": True})


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    given = os.environ.get("DISPATCH_TEST_REDIS_URL")
    if given:
        yield given
        return
    with tempfile.TemporaryDirectory() as workdir:
        proc, url = start_redis_server(workdir)
        try:
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """The daemon's log lines (JSON, one a line) written here instead of stderr."""
    out = io.StringIO()
    monkeypatch.setattr(log, "stream", out)
    monkeypatch.setattr(log, "human", False)
    return out


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers from where a test lives and what it needs, so none can be forgotten: `docker`
    for a test that asks for the engine, `e2e` for the multi-process and CLI tests, `slow` for
    the fault tests."""
    for item in items:
        if "docker_host" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
        if "e2e" in item.path.parts:
            item.add_marker(pytest.mark.e2e)
        if "faults" in item.path.parts:  # real daemons, proxies, engines: seconds each
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def tmux() -> str:
    """The tmux binary for a test that drives a real terminal (tests/support/tmux.py)."""
    from tests.support.tmux import tmux_binary

    return tmux_binary()
