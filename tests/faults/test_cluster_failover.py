"""A Redis Cluster failing over under a running fleet: three primaries, each with a replica
(tests/support/redis_cluster.py), two real daemons given a seed list, and jobs running when a
replica is promoted (`CLUSTER FAILOVER`, the coordinated kind: the primary hands over with
nothing unacknowledged) in the middle of their runs, on the primary that owns the queue's slot
and on the one that owns the spend ledgers'.

The faults issue's rules, on a cluster: every job ends completed, each ran exactly once (its
trace says one start and one end), no attempt was spent (every record is attempt 1), and the
daemons ride through the slots moving, their lock renewals and sweeps included.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from dispatch.queue.connect import redis_client
from dispatch.queue.keys import budget_keys, queue_keys
from dispatch.queue.wire import send_all
from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, dispatch_json
from tests.support.polling import eventually, eventually_sync
from tests.support.redis_cluster import redis_cluster, seed_list

JOBS = 24
FAST = {"DISPATCH_LOCK_MS": "4000", "DISPATCH_CONCURRENCY": "4", "DISPATCH_SHUTDOWN_GRACE": "1s"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    with redis_cluster(tmp_path_factory.mktemp("replicated"), primaries=3, replicas=1) as urls:
        yield urls


def _replicas_of(nodes: list[str], keys: list[str]) -> list[tuple[str, int]]:
    """The replicas following the primaries that own `keys`' slots, each once, read before any
    promotion (after one, CLUSTER SLOTS may still name the new primary a replica for a while)."""
    found: list[tuple[str, int]] = []
    with Redis.from_url(nodes[0]) as any_node:
        ranges = any_node.cluster("SLOTS")
        for key in keys:
            slot = int(any_node.cluster("KEYSLOT", key))
            for start, end, _primary, *replicas in ranges:
                if int(start) <= slot <= int(end):
                    address = (_text(replicas[0][0]), int(replicas[0][1]))
                    found += [address] if address not in found else []
    return found


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _promote(host: str, port: int) -> None:
    """CLUSTER FAILOVER, the coordinated kind, until the replica says it is a primary (one that
    does not complete in time is dropped by the server: ask again)."""
    with Redis(host=host, port=port) as replica:
        for _ in range(4):
            replica.cluster("FAILOVER")
            with contextlib.suppress(AssertionError):
                eventually_sync(lambda: replica.info("replication")["role"] == "master", 8)
                return
    raise AssertionError(f"{host}:{port} was not promoted")


def _completed(env: dict[str, str]) -> set[str]:
    return {v["id"] for v in dispatch_json(env, "jobs", "--state", "completed", "--limit", "500")}


def _ran(trace: Path) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for line in trace.read_text().splitlines() if trace.exists() else []:
        what, job = line.split()
        seen.setdefault(job, []).append(what)
    return seen


def test_a_promotion_while_jobs_run_loses_none_runs_none_twice_and_spends_no_attempt(
    nodes: list[str], prefix: str, tmp_path: Path
) -> None:
    seeds = seed_list(nodes[:3])
    trace = tmp_path / "trace"
    envs = [
        cli_env(seeds, prefix, tmp_path / f"s{n}", DISPATCH_HOST=f"h{n}", **FAST) for n in (1, 2)
    ]
    body = f"echo start $0 >> {trace}; sleep 1.5; echo end $0 >> {trace}"
    ids = [
        dispatch(envs[0], "submit", "--", "sh", "-c", body, f"j{n}").stdout.strip()
        for n in range(JOBS)
    ]
    assert all(ids)
    replicas = _replicas_of(nodes, [queue_keys("jobs", prefix).wait, budget_keys(prefix).open])
    with daemon(envs[0]), daemon(envs[1]):
        eventually_sync(lambda: len(_ran(trace)) >= 4, 30)  # runs under way on both hosts
        for host, port in replicas:
            _promote(host, port)
        ended = sum(marks[-1] == "end" for marks in _ran(trace).values())
        assert ended < JOBS - 4  # the slots moved with runs in flight and jobs still queued
        eventually_sync(lambda: _completed(envs[0]) >= set(ids), 90)
        logs = [daemon_log(env) for env in envs]
    ran = _ran(trace)
    assert sorted(ran) == sorted(f"j{n}" for n in range(JOBS))
    assert all(marks == ["start", "end"] for marks in ran.values()), ran  # once, to the end
    records = [r for r in dispatch_json(envs[0], "runs", "--limit", "500") if r["id"] in set(ids)]
    assert sorted((r["outcome"], r["attempt"]) for r in records) == [("completed", 1)] * JOBS
    for log in logs:  # no run lost its lock or was stopped for want of renewals
        assert '"event":"lock_lost"' not in log and '"event":"lock_deadline_stop"' not in log


def test_after_a_primary_dies_the_wire_path_finds_its_promoted_replica(
    tmp_path_factory: pytest.TempPathFactory, prefix: str
) -> None:
    """A primary shut down (no handover): its replica takes over after cluster-node-timeout
    (2 s here). The wire path's calls to the dead node fail as faults, then, the slot map read
    again, reach the new primary: none is lost to a map that still names the dead node."""
    with redis_cluster(tmp_path_factory.mktemp("lame"), primaries=3, replicas=1) as urls:
        asyncio.run(_through_a_dead_primary(urls, prefix))


async def _through_a_dead_primary(urls: list[str], prefix: str) -> None:
    key = queue_keys("jobs", prefix).wait
    client = redis_client(seed_list(urls[:3]), 1)
    assert isinstance(client, RedisCluster)
    try:
        assert await send_all(client, [("RPUSH", key, "a")]) == [1]
        owner = client.nodes_manager.get_node_from_slot(client.keyslot(key))
        with (
            Redis(host=owner.host, port=owner.port) as doomed,
            contextlib.suppress(RedisConnectionError),
        ):
            doomed.shutdown(nosave=True)  # it waits for its replica to have "a" first

        async def pushed() -> list[Any] | None:
            with contextlib.suppress(RedisError):
                return await send_all(client, [("RPUSH", key, "b")])
            return None

        assert await eventually(pushed, 30) == [2]  # the replica had "a": nothing lost
        now = client.nodes_manager.get_node_from_slot(client.keyslot(key))
        assert now.name != owner.name
    finally:
        await client.aclose()
