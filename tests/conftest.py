"""Shared fixtures: a real redis-server (started here on a free port unless
DISPATCH_TEST_REDIS_URL names one), an anyio backend on uvloop, and the log captured.

The tests of CLUSTER_SUBSETS that use Redis run twice: on that server (`[standalone]`) and on
a real Redis Cluster of three primaries (`[cluster]`, tests/support/redis_cluster.py, started
once per test process, named by a seed list); those are marked `cluster`.
DISPATCH_TEST_REDIS_CLUSTER=1 runs the cluster runs alone, =0 the standalone ones alone."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.log import log
from dispatch.queue.connect import redis_client
from tests.support.redis_cluster import redirections_served, redis_cluster, seed_list
from tests.support.redis_server import own_redis_server

pytest_plugins = ["tests.support.docker"]


@pytest.fixture(scope="session")
def anyio_backend() -> tuple[str, dict[str, bool]]:
    return ("asyncio", {"use_uvloop": True})


CLUSTER_RUNS = os.environ.get("DISPATCH_TEST_REDIS_CLUSTER", "")
KINDS = {"1": ["cluster"], "0": ["standalone"]}.get(CLUSTER_RUNS, ["standalone", "cluster"])
# folders and modules whose tests run on a cluster too: each is written against the `redis`
# fixture or `redis_url` through dispatch's own clients, never a plain Redis of a URL
CLUSTER_SUBSETS = (
    "queue", "lua", "spend", "triggers", "fleet", "gates",
    "test_status", "test_on_failure",
)  # fmt: skip
STANDALONE_ONLY = ("test_cluster_doctor", "test_cluster_failover")  # their own clusters


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "redis_url" in metafunc.fixturenames and _in_subsets(metafunc.definition.path):
        metafunc.parametrize("redis_kind", KINDS, indirect=True, scope="session")


def _in_subsets(path: Path) -> bool:
    if path.stem in STANDALONE_ONLY:
        return False
    return any(subset in path.parts or path.stem == subset for subset in CLUSTER_SUBSETS)


@pytest.fixture(scope="session")
def redis_kind(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "standalone"))


@pytest.fixture(scope="session")
def redis_url(redis_kind: str, request: pytest.FixtureRequest) -> Iterator[str]:
    if redis_kind == "cluster":
        yield request.getfixturevalue("cluster_url")
        return
    given = os.environ.get("DISPATCH_TEST_REDIS_URL")
    if given:
        yield given
        return
    with own_redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A seed list of a real cluster of three primaries, started once per test process. At
    the end, no node may have answered MOVED, ASK or CROSSSLOT: its slots never moved, so one
    would be a call sent to the wrong node (which redis-py follows: one round trip lost) or
    one whose keys span slots (which a cluster refuses)."""
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as nodes:
        yield seed_list(nodes)
        assert redirections_served(nodes) == {}, "a call reached the wrong node or spanned slots"


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
        kind = getattr(getattr(item, "callspec", None), "params", {}).get("redis_kind")
        if kind == "cluster":
            item.add_marker(pytest.mark.cluster)
        elif CLUSTER_RUNS == "1":
            item.add_marker(pytest.mark.skip(reason="runs on a standalone Redis only"))
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
