"""Pointed at a node of a real Redis Cluster (three primaries, tests/support/redis_cluster.py),
which dispatch does not serve yet: the doctor fails on it and names it, the daemon refuses to
start (exit 2, one line: its unit does not restart it), and a command that meets a
redirection says why in one line instead of a bare MOVED. A standalone Redis is `standalone`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemons import SOURCE, cli_env, dispatch
from tests.support.redis_cluster import redis_cluster


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as urls:
        yield urls


def test_the_doctor_fails_on_a_cluster_node_and_says_standalone_elsewhere(
    nodes: list[str], redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(nodes[0], prefix, tmp_path / "state", DOCKER_HOST="unix:///nonexistent")
    done = dispatch(env, "doctor")
    lines = {ln.split()[1]: ln for ln in done.stdout.splitlines() if len(ln.split()) > 1}
    assert done.returncode == 1 and lines["redis-topology"].startswith("FAIL")
    assert "Redis Cluster (3 primaries)" in lines["redis-topology"]
    alone = cli_env(redis_url, prefix, tmp_path / "alone", DOCKER_HOST="unix:///nonexistent")
    ok = dispatch(alone, "doctor").stdout
    assert any(ln.split()[:3] == ["ok", "redis-topology", "standalone"] for ln in ok.splitlines())


def test_the_daemon_refuses_to_start_on_a_cluster_node(
    nodes: list[str], prefix: str, tmp_path: Path
) -> None:
    env = cli_env(nodes[1], prefix, tmp_path / "state", DISPATCH_HOST="on-cluster")
    done = subprocess.run([*SOURCE, "worker"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("dispatch: DISPATCH_REDIS_URL names a node of a Redis Cluster (3 primaries)")
    )


def test_a_redirection_is_said_in_one_line_not_as_a_bare_moved(
    nodes: list[str], prefix: str, tmp_path: Path
) -> None:
    said = []
    for url in nodes:  # the queue's slot lives on one node: the others redirect
        env = cli_env(url, prefix, tmp_path / url.rsplit(":", 1)[1], DISPATCH_HOST="c")
        done = dispatch(env, "submit", "--", "true")
        if done.returncode != 0:
            said.append((done.returncode, done.stderr))
    assert len(said) >= 2
    for code, stderr in said:
        assert code == 2 and stderr.count("\n") == 1 and "MOVED" not in stderr
        assert "names a node of a Redis Cluster" in stderr
