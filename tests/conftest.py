"""Shared fixtures: a real redis-server (started here on a free port unless
DISPATCH_TEST_REDIS_URL names one), an anyio backend on uvloop, and the log captured.

With DISPATCH_TEST_REDIS_CLUSTER=1 the Redis is a real cluster of three primaries instead
(tests/support/redis_cluster.py, one per test process), named by a seed list, and only the
tests marked `cluster` run: the subsets that must hold on a cluster (CLUSTER_SUBSETS)."""

from __future__ import annotations

import io
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from dispatch.log import log
from dispatch.queue.connect import redis_client
from tests.support.redis_cluster import redis_cluster, seed_list
from tests.support.redis_server import start_redis_server

pytest_plugins = ["tests.support.docker"]


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, bool]]:
    return ("asyncio", {"use_uvloop": True})


ON_CLUSTER = os.environ.get("DISPATCH_TEST_REDIS_CLUSTER") == "1"
# folders and modules of tests that run again on a cluster: each is written against the
# `redis` fixture or `redis_url` through dispatch's own client, never a plain Redis of a URL
CLUSTER_SUBSETS = ("queue", "lua")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if ON_CLUSTER:
        with redis_cluster(tmp_path_factory.mktemp("cluster")) as nodes:
            yield seed_list(nodes)
        return
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


@pytest.fixture(scope="session")
def cluster_url(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A seed list of a real cluster: the session's Redis on a cluster run, else one started
    for the tests that ask (a few seconds, once per test process)."""
    if ON_CLUSTER:
        yield redis_url
        return
    with redis_cluster(tmp_path_factory.mktemp("own-cluster")) as nodes:
        yield seed_list(nodes)


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
    client = redis_client(redis_url, socket_timeout=30)
    try:
        yield client
    finally:
        await client.aclose()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers from where a test lives and what it needs, so none can be forgotten: `docker`
    for a test that asks for the engine, `e2e` for the multi-process and CLI tests, `slow` for
    the fault tests."""
    for item in items:
        if _on_cluster(item):
            item.add_marker(pytest.mark.cluster)
        elif ON_CLUSTER:
            item.add_marker(pytest.mark.skip(reason="runs on a standalone Redis only"))
        if "docker_host" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
        if "e2e" in item.path.parts:
            item.add_marker(pytest.mark.e2e)
        if "faults" in item.path.parts:  # real daemons, proxies, engines: seconds each
            item.add_marker(pytest.mark.slow)


def _on_cluster(item: pytest.Item) -> bool:
    parts = item.path.parts
    return any(subset in parts or item.path.stem == subset for subset in CLUSTER_SUBSETS)


@pytest.fixture
def tmux() -> str:
    """The tmux binary for a test that drives a real terminal (tests/support/tmux.py)."""
    from tests.support.tmux import tmux_binary

    return tmux_binary()
