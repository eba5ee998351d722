"""A throwaway Redis Cluster of three primaries on free loopback ports: three `redis-server
--cluster-enabled yes` processes joined by `redis-cli --cluster create`, up once every node
says `cluster_state:ok`. Nothing here is mocked: the nodes answer MOVED and CROSSSLOT as a
managed cluster would."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis import Redis

from bench.support.redis import cluster_port
from tests.support.polling import eventually_sync


@contextmanager
def redis_cluster(workdir: Path, primaries: int = 3, replicas: int = 0) -> Iterator[list[str]]:
    """The nodes' URLs, while the cluster runs: the primaries first, then `replicas` for each
    (redis-cli --cluster create assigns them; `CLUSTER NODES` says which follows which)."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.fail("redis-server is not installed; run the README's test command")
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for _ in range(primaries * (1 + replicas)):
            proc, port = _start_node(server, workdir)
            procs.append(proc)
            ports.append(port)
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert created.returncode == 0, created.stdout + created.stderr
        eventually_sync(lambda: all(_state_ok(p) for p in ports), 30)
        if replicas:  # every replica has caught up with its primary's link
            eventually_sync(lambda: all(_linked(p) for p in ports), 30)
        yield [f"redis://127.0.0.1:{p}/0" for p in ports]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def _start_node(server: str, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """One node on a free port, answering as itself (its pid): a port another test process
    took between the check and the bind makes the server exit, and another port is tried."""
    for _ in range(10):
        port = cluster_port()
        node = workdir / str(port)
        node.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no",
             "--cluster-node-timeout", "2000", "--dir", str(node)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            if _pid_at(port) == proc.pid:
                return proc, port
            time.sleep(0.02)
        proc.kill()
        proc.wait()
    pytest.fail("no cluster node could be started on a free port")


def _pid_at(port: int) -> int | None:
    try:
        with Redis(port=port, socket_timeout=1) as r:
            return int(r.info("server")["process_id"])
    except Exception:  # not listening yet, LOADING, or not a redis at all
        return None


def seed_list(nodes: list[str]) -> str:
    """DISPATCH_REDIS_URL naming every node as a seed: `redis://a:1/0,a:2,a:3`."""
    first, *rest = nodes
    return ",".join([first, *(url.split("://", 1)[1].split("/", 1)[0] for url in rest)])


def _state_ok(port: int) -> bool:
    with Redis(port=port, socket_timeout=1) as r:
        return r.cluster("INFO").get("cluster_state") == "ok"


def _linked(port: int) -> bool:
    with Redis(port=port, socket_timeout=1) as r:
        info = r.info("replication")
        return info.get("role") == "master" or info.get("master_link_status") == "up"


def redirections_served(nodes: list[str]) -> dict[str, int]:
    """The MOVED, ASK and CROSSSLOT errors the nodes have answered since they started, by kind
    (`INFO errorstats`): on a cluster whose slots never moved, any one is a call dispatch sent
    to the wrong node, or with keys in several slots."""
    found: dict[str, int] = {}
    for url in nodes:
        with Redis.from_url(url, socket_timeout=5) as node:
            for name, stat in node.info("errorstats").items():
                kind = name.removeprefix("errorstat_")
                if kind in ("MOVED", "ASK", "CROSSSLOT"):
                    found[kind] = found.get(kind, 0) + int(stat["count"])
    return found
