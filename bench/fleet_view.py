"""The fleet snapshot behind `dispatch status`: how long one read takes on a large fleet.

    python -m bench.fleet_view [--json] [--jobs 100000] [--hosts 50] [--reps 50]

Starts its own redis-server on a free port unless DISPATCH_REDIS_URL names one. Fills it with
`--jobs` jobs, 60% delayed (each with a defer record, over six reasons), 30% ready, 10% done
in the last hour (each with a run record; the snapshot reads the newest 500), on one queue, and
`--hosts` heartbeats naming 10 running jobs each and their budget; then takes `--reps` snapshots
one after another.

Figures: snapshot wall p50 / p95 / max (client and server together, loopback), the round trips
(3, whatever the size), and how many delayed jobs the reasons were read from (the sample).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

import msgspec
import uvloop
from redis.asyncio import Redis

from bench.support.redis import redis_server, redis_version
from bench.support.stats import percentile
from dispatch.fleet import view
from dispatch.model import DeferRecord, RunRecord, iso
from dispatch.queue import keys

PREFIX = "bench-view"
REASONS = ("scope-repo", "pause-window", "host-slot", "endpoint", "wait-hold", "spend-hold")


async def fill(redis: Redis, prefix: str, jobs: int, hosts: int) -> None:
    k = keys.queue_keys("jobs", prefix)
    now = int(time.time() * 1000)
    batch = 5_000
    for start in range(0, jobs, batch):
        async with redis.pipeline(transaction=False) as p:
            for i in range(start, min(start + batch, jobs)):
                job_id = f"j{i:07d}"
                p.hset(k.data, job_id, b'{"v":1,"id":"x","command":["true"]}')
                p.hset(k.queued, job_id, now - i)
                kind = i % 10
                if kind < 6:
                    p.zadd(k.delayed, {job_id: now + 60_000 + i})
                    record = DeferRecord(reason=REASONS[i % len(REASONS)], until="", at="")
                    p.hset(k.defer, job_id, msgspec.json.encode(record))
                elif kind < 9:
                    p.rpush(k.wait, job_id)
                else:  # ended in the last hour: a run record each, a third of them failed
                    p.zadd(k.done, {job_id: now})
                    run = RunRecord(
                        id=job_id, attempt=1, host="host-00", queue="jobs",
                        outcome="failed" if i % 3 == 0 else "completed",
                        reason="exit-1" if i % 3 == 0 else "", ended_at=iso(now - i % 3_600_000),
                    )  # fmt: skip
                    p.hset(k.runs, f"{job_id}#1", msgspec.json.encode(run))
                    p.zadd(k.runs_idx, {f"{job_id}#1": now - i % 3_600_000})
            await p.execute()
    async with redis.pipeline(transaction=False) as p:
        for h in range(hosts):
            name = f"host-{h:02d}"
            p.sadd(keys.hosts_registry(prefix), name)
            p.hset(keys.hosts_seen(prefix), name, now)
            running = [{"id": f"r{h}-{n}", "queue": "jobs", "target": "acme/web#1",
                        "since_ms": now} for n in range(10)]  # fmt: skip
            budget = {"memory": 2**33, "memory_limit": 2**35, "cpus": 8, "cpus_limit": 32}
            beat = {"host": name, "running": 10, "slots": 40, "version": "0.1.0",
                    "jobs": running, "budget": budget}  # fmt: skip
            p.set(keys.host_alive(name, prefix), json.dumps(beat), px=600_000)
        await p.execute()


async def clear(redis: Redis, prefix: str) -> None:
    """The bench's keys only: DISPATCH_REDIS_URL may name a Redis that holds others."""
    found = [key async for key in redis.scan_iter(match=f"*{prefix}*", count=1000)]
    if found:
        await redis.delete(*found)


async def run(url: str, jobs: int, hosts: int, reps: int, prefix: str = PREFIX) -> dict[str, Any]:
    redis = Redis.from_url(url)
    await clear(redis, prefix)
    await fill(redis, prefix, jobs, hosts)
    walls: list[float] = []
    found = view.Snapshot()
    for _ in range(reps):
        t0 = time.perf_counter()
        found = await view.snapshot(redis, prefix)
        walls.append(time.perf_counter() - t0)
    assert not found.error, found.error
    await clear(redis, prefix)
    await redis.aclose()
    return {
        "jobs": jobs,
        "hosts": hosts,
        "reps": reps,
        "snapshot_p50_ms": round(percentile(walls, 0.50) * 1000, 2),
        "snapshot_p95_ms": round(percentile(walls, 0.95) * 1000, 2),
        "snapshot_max_ms": round(max(walls) * 1000, 2),
        "round_trips": 3,
        "reasons_sampled_from": found.sampled,
        "live_hosts_seen": len(found.live),
        "redis": await redis_version(url),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with redis_server() as url:
        figures = uvloop.run(run(url, args.jobs, args.hosts, args.reps))
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
