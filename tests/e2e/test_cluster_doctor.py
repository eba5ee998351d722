"""Pointed at a node of a real Redis Cluster (three primaries, tests/support/redis_cluster.py):
the doctor says what it talks to and where each of this host's tags lives, and fails, naming
why, on a cluster that cannot serve every key (a slot no primary serves, a primary that does
not answer); a daemon given one node's plain redis:// URL serves the whole cluster; a
redirection that still reaches the command line is said in one line, never as a bare MOVED."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from redis.exceptions import MovedError

from dispatch.cli import commands
from tests.support.daemons import cli_env, daemon, dispatch, wait_state
from tests.support.redis_cluster import redis_cluster


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as urls:
        yield urls


def _lines(stdout: str) -> list[tuple[str, str, str]]:
    return [(ln[:4].strip(), ln[6:24].strip(), ln[24:]) for ln in stdout.splitlines()]


def test_the_doctor_names_the_cluster_and_where_each_tag_lives(
    nodes: list[str], redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(nodes[0], prefix, tmp_path / "state", DISPATCH_HOST="c1")
    lines = _lines(dispatch(env, "doctor").stdout)
    shape = [ln for ln in lines if ln[1] == "redis-topology"]
    assert shape == [("ok", "redis-topology", "Redis Cluster of 3 primaries, no replicas, "
                      "16384 of 16384 slots served")], lines  # fmt: skip
    slots = {ln[2].split(":")[0]: ln for ln in lines if ln[1] == "redis-slot"}
    assert sorted(slots) == ["budget", "jobs", "jobs@c1"]
    assert all(mark == "ok" and " on 127.0.0.1:" in words for mark, _, words in slots.values())
    assert next(ln[:2] for ln in lines if ln[1] == "scripts") == ("ok", "scripts")
    alone = cli_env(redis_url, prefix, tmp_path / "alone", DOCKER_HOST="unix:///nonexistent")
    assert ("ok", "redis-topology", "standalone") in _lines(dispatch(alone, "doctor").stdout)


def test_the_doctor_fails_on_a_slot_no_primary_serves(
    nodes: list[str], prefix: str, tmp_path: Path
) -> None:
    with Redis.from_url(nodes[1]) as any_node:
        first = any_node.cluster("SLOTS")[0]
    slot, (host, port) = int(first[0]), first[2][:2]
    node = Redis(host=host, port=int(port))  # the slot's own primary drops it
    node.cluster("DELSLOTS", slot)
    try:
        env = cli_env(nodes[0], prefix, tmp_path / "state", DISPATCH_HOST="c1")
        done = dispatch(env, "doctor")
        assert done.returncode == 1
        failed = [ln for ln in _lines(done.stdout) if ln[0] == "FAIL"]
        assert failed and failed[0][1] == "redis-topology", done.stdout
        assert "slots" in failed[0][2] and "\n" not in failed[0][2]
    finally:
        node.cluster("ADDSLOTS", slot)
        node.close()


def test_a_daemon_given_one_node_serves_the_cluster(
    nodes: list[str], prefix: str, tmp_path: Path
) -> None:
    env = cli_env(nodes[2], prefix, tmp_path / "state", DISPATCH_HOST="on-cluster")
    ids = [dispatch(env, "submit", "--", "true").stdout.strip() for _ in range(6)]
    assert all(ids)
    pinned = dispatch(env, "submit", "--queue", "jobs@on-cluster", "--", "true").stdout.strip()
    with daemon(env):
        for job in [*ids, pinned]:
            assert wait_state(env, job, "completed", "failed") == "completed"
    said = dispatch(env, "status")
    assert said.returncode == 0 and "on-cluster" in said.stdout


def test_a_redirection_is_said_in_one_line_not_as_a_bare_moved(
    nodes: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    moved = []
    for url in nodes:  # a plain client of one node: the other nodes' slots answer MOVED
        with Redis.from_url(url) as node:
            try:
                node.set("{some-queue}:k", "v")
            except MovedError as exc:
                moved.append(exc)
    assert len(moved) == 2
    assert commands._redis_failed(moved[0], f"redis: {moved[0]}") == 1  # the CLI's last resort
    said = capsys.readouterr().err
    assert said.startswith("dispatch: the Redis Cluster answered MOVED (") and said.count("\n") == 1


def test_the_doctor_fails_on_a_primary_that_does_not_answer(
    tmp_path_factory: pytest.TempPathFactory, prefix: str, tmp_path: Path
) -> None:
    with redis_cluster(tmp_path_factory.mktemp("lame")) as urls:
        with Redis.from_url(urls[2]) as doomed:
            doomed.shutdown(nosave=True)
        env = cli_env(",".join(urls), prefix, tmp_path / "state", DISPATCH_HOST="c1")
        done = dispatch(env, "doctor")
    assert done.returncode == 1
    failed = [ln for ln in _lines(done.stdout) if ln[0] == "FAIL"]
    assert failed and failed[0][1] in ("redis-topology", "redis"), done.stdout
    port = urls[2].rsplit(":", 1)[1].split("/")[0]
    assert any(port in words for _, _, words in failed), done.stdout
