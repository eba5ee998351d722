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

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from dispatch.queue.keys import budget_keys, queue_keys
from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, dispatch_json
from tests.support.polling import eventually_sync
from tests.support.redis_cluster import redis_cluster, seed_list

JOBS = 24
FAST = {"DISPATCH_LOCK_MS": "4000", "DISPATCH_CONCURRENCY": "4", "DISPATCH_SHUTDOWN_GRACE": "1s"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    with redis_cluster(tmp_path_factory.mktemp("replicated"), primaries=3, replicas=1) as urls:
        yield urls


def _replica_of(nodes: list[str], key: str) -> Redis:
    """A client of a replica that follows the primary owning `key`'s slot (after a promotion,
    the old primary rejoins as one within moments)."""
    return eventually_sync(lambda: _find_replica(nodes, key), 20)


def _find_replica(nodes: list[str], key: str) -> Redis | None:
    with Redis.from_url(nodes[0]) as any_node:
        slot = int(any_node.cluster("KEYSLOT", key))
        for start, end, _primary, *replicas in any_node.cluster("SLOTS"):
            if int(start) <= slot <= int(end) and replicas:
                host, port = replicas[0][:2]
                replica = Redis(host=_text(host), port=int(port))
                if replica.info("replication")["role"] == "slave":  # not a stale map's
                    return replica
                replica.close()
    return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _promote(replica: Redis) -> None:
    replica.cluster("FAILOVER")
    eventually_sync(lambda: replica.info("replication")["role"] == "master", 20)


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
    with daemon(envs[0]), daemon(envs[1]):
        eventually_sync(lambda: len(_ran(trace)) >= 4, 30)  # runs under way on both hosts
        for key in (queue_keys("jobs", prefix).wait, budget_keys(prefix).open):
            with _replica_of(nodes, key) as replica:
                _promote(replica)
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
