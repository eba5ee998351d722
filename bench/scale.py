"""How the queue's cost grows with what it holds: queued jobs, kept records, queues.

    python -m bench.scale [--sizes 1000,10000,100000,1000000] [--sample 10000]
                          [--kept 1000000] [--queues 1,100,1000] [--idle-s 10] [--json]

Starts its own redis-server (no persistence) and uses a fresh prefix per phase.

  size N   (each size `--reps` times, alternated, each on a redis-server of its own)
           N no-op jobs (a 200-byte document each) enqueued into one queue, `--batch` per
           call: the enqueue rate and Redis memory per queued job (`used_memory` delta over
           N). Then, with N still queued, `--sample` more are claimed and finished as a busy
           daemon does (finish-and-claim of 25, a run record each): the client's CPU (the
           daemon's side of the hot path: `Queue` and redis-py), Redis's CPU and its commands
           per job. Then the fleet snapshot's time (`dispatch status`'s read, p50 of 10) and
           the stall sweep's cost per round (p50 of 20 rounds).
  kept     `--kept` jobs claimed and finished under a retention that keeps them all (done
           set and run records): memory per kept record, and the claim-and-finish cost of
           the first and the last `--sample` of them, side by side.
  cluster  `--drain` no-op jobs drained by one real daemon (c50) on one Redis, then by three
           on a cluster of three primaries, each daemon's own queue on its own primary.
  idle     one real daemon (bench.queue's, no-op runner) with nothing to do, in a fleet of Q
           queues (each holding a job due tomorrow, as host-affine queues of Q hosts would):
           its Redis commands per second over `--idle-s` seconds, for each Q in `--queues`.

The ratios the targets name are printed last (`ratios`), each from this one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import uvloop
from redis.asyncio import Redis, RedisCluster

from bench.queue import Fleet, drained
from bench.support.cpu import machine_cpu_s
from bench.support.redis import Stats, redis_cluster, redis_server, redis_version, stats
from dispatch.fleet import view
from dispatch.model import Job, encode_job, new_id
from dispatch.queue.connect import redis_client
from dispatch.queue.items import Finish, Retention
from dispatch.queue.keys import queue_keys
from dispatch.queue.transitions import Claim, NewJob, Queue

Row = dict[str, Any]
COHORT = 25  # claims per finish-and-claim, as a daemon of 25+ free slots takes them
LOCK_MS = 60_000
DOC_BYTES = 200
DAY_MS = 86_400_000
# a run record of about the size the daemon writes for a no-op job
RUN = (
    b'{"outcome":"completed","reason":"","attempt":1,"exit_code":0,"host":"bench","note":"'
    + b"x" * 160
    + b'"}'
)


def documents(n: int) -> list[NewJob]:
    """No-op jobs whose encoded document is DOC_BYTES long (padded by a label)."""
    jobs = []
    for _ in range(n):
        job_id = new_id()
        base = len(encode_job(Job(id=job_id, command=["true"], env={"PAD": ""})))
        doc = Job(id=job_id, command=["true"], env={"PAD": "x" * max(DOC_BYTES - base, 0)})
        jobs.append(NewJob(job_id, encode_job(doc)))
    return jobs


async def forget(redis: Redis, prefix: str) -> None:
    """Every key of the phase's prefix gone, freed now (DEL, not UNLINK: the next phase's
    memory baseline must not shrink under it)."""
    found = [key async for key in redis.scan_iter(match=f"*{prefix}*", count=1_000)]
    for i in range(0, len(found), 500):
        await redis.delete(*found[i : i + 500])


async def used_memory(redis: Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


async def enqueue(queue: Queue, n: int, batch: int) -> float:
    """Seconds spent enqueueing `n` jobs, made a batch at a time (a million documents held at
    once would grow the bench's own heap, and its CPU per job with it)."""
    took = 0.0
    for start in range(0, n, batch):
        jobs = documents(min(batch, n - start))
        started = time.perf_counter()
        await queue.enqueue(jobs)
        took += time.perf_counter() - started
    return took


async def claim_and_finish(queue: Queue, count: int) -> tuple[int, float, Stats]:
    """`count` jobs through finish-and-claim cohorts: (jobs, client CPU s, Redis stats)."""
    before, cpu = await stats(queue.redis), time.process_time()
    done = 0
    claims: list[Claim] = list((await queue.claim(COHORT, "bench", LOCK_MS)).claims)
    while claims:
        ends = [Finish("finish", c.id, c.token, b"{}", run_id=f"{c.id}#1", run=RUN) for c in claims]
        done += len(ends)
        want = min(COHORT, count - done)
        if want <= 0:
            await queue.finish(ends)
            break
        _, batch = await queue.finish_and_claim(ends, want, "bench", LOCK_MS)
        claims = list(batch.claims)
    cpu = time.process_time() - cpu
    return done, cpu, await stats(queue.redis) - before


def per_job(done: int, cpu_s: float, used: Stats) -> Row:
    return {
        "client_cpu_us_per_job": round(cpu_s / done * 1e6, 1),
        "redis_cpu_us_per_job": round(used.cpu_s / done * 1e6, 1),
        "redis_cmds_per_job": round(used.total / done, 3),
    }


async def timed(calls: int, make: Any) -> float:
    """p50 milliseconds of `calls` awaits of make()."""
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        await make()
        took.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(took), 2)


async def size_row(redis: Redis, n: int, args: argparse.Namespace) -> Row:
    prefix = f"s{uuid.uuid4().hex[:8]}"
    queue = Queue(redis, "jobs", prefix)
    await queue.pause()  # enqueue only: nothing claims until the sample runs
    memory = await used_memory(redis)
    elapsed = await enqueue(queue, n, args.batch)
    row: Row = {"queued": n, "enqueue_per_s": round(n / elapsed)}
    row["redis_bytes_per_queued_job"] = round((await used_memory(redis) - memory) / n)
    await enqueue(queue, args.sample, args.batch)  # the sample, behind the N
    await queue.resume()
    (_, steal), wall = machine_cpu_s(), time.perf_counter()
    row.update(per_job(*await claim_and_finish(queue, args.sample)))
    row["steal_pct"] = round((machine_cpu_s()[1] - steal) / (time.perf_counter() - wall) * 100, 1)
    row["snapshot_p50_ms"] = await timed(10, lambda: view.snapshot(redis, prefix, 30.0))
    before = await stats(redis)
    row["sweep_p50_ms"] = await timed(20, lambda: queue.sweep(3, b"{}"))
    row["sweep_redis_cpu_us"] = round(((await stats(redis)) - before).cpu_s / 20 * 1e6, 1)
    await forget(redis, prefix)
    return row


async def fresh_size_row(n: int, args: argparse.Namespace) -> Row:
    """`size_row` on a redis-server of its own: a server that has held a million jobs stays
    slower per job (its allocator's state) after they are gone, which is not what N costs."""
    with redis_server() as url:
        redis = redis_client(url, 120)
        try:
            return await size_row(redis, n, args)
        finally:
            await redis.aclose()


async def kept_row(redis: Redis, args: argparse.Namespace) -> Row:
    prefix, n, sample = f"k{uuid.uuid4().hex[:8]}", args.kept, args.sample
    keep = Retention(keep_done=n, keep_runs=n)
    queue = Queue(redis, "jobs", prefix, keep)
    memory = await used_memory(redis)
    await enqueue(queue, n, args.batch)
    first = per_job(*await claim_and_finish(queue, sample))
    await claim_and_finish(queue, n - 2 * sample)
    last = per_job(*await claim_and_finish(queue, sample))
    kept = int(await redis.zcard(queue.keys.done))
    row: Row = {
        "kept": kept,
        "redis_bytes_per_kept_job": round((await used_memory(redis) - memory) / kept),
    }
    row.update({f"first_{k}": v for k, v in first.items()})
    row.update({f"last_{k}": v for k, v in last.items()})
    await forget(redis, prefix)
    return row


async def idle_row(url: str, redis: Redis, queues: int, args: argparse.Namespace, tmp: Path) -> Row:
    """One daemon (which serves `jobs` and its own queue) in a fleet of `queues` queues, each
    holding one job due in a day, as host-affine queues do when the fleet has that many hosts."""
    prefix = f"i{uuid.uuid4().hex[:8]}"
    for i in range(queues - 1):
        later = NewJob(new_id(), encode_job(Job(id="x", command=["true"])), delay_ms=DAY_MS)
        await Queue(redis, f"jobs@host-{i}", prefix).enqueue([later])
    fleet = Fleet(url, prefix, 1, 10, tmp, gates=False)
    await fleet.start(redis, settle_s=2.0)
    before = await stats(redis)
    await asyncio.sleep(args.idle_s)
    used = await stats(redis) - before
    await asyncio.get_running_loop().run_in_executor(None, fleet.stop)
    top = sorted(used.calls.items(), key=lambda kv: -kv[1])[:4]
    await forget(redis, prefix)
    return {
        "queues": queues,
        "idle_cmds_per_s": round(used.total / args.idle_s, 2),
        "idle_redis_cpu_pct": round(used.cpu_s / args.idle_s * 100, 2),
        "top_commands": dict(top),
    }


async def drain_s(url: str, daemons: int, jobs: int, tmp: Path) -> float:
    """Seconds `daemons` daemons (c50, no gates) take to drain `jobs` no-op jobs, spread over
    their own queues, each queue's tag on a primary of its own when `url` is a cluster's."""
    redis = redis_client(url, 60)
    prefix = await spread_prefix(redis, daemons)
    queues = [Queue(redis, f"jobs@bench-{i + 1}", prefix) for i in range(daemons)]
    for queue in queues:
        await queue.pause()
        await enqueue(queue, jobs // daemons, 500)
    fleet = Fleet(url, prefix, daemons, 50, tmp, gates=False)
    await fleet.start(redis)
    started = time.perf_counter()
    for queue in queues:
        await queue.resume()
    for queue in queues:  # they drain side by side; each is waited for in turn
        await drained(queue, timeout_s=600)
    elapsed = time.perf_counter() - started
    await asyncio.get_running_loop().run_in_executor(None, fleet.stop)
    await redis.aclose()
    return elapsed


async def spread_prefix(redis: Redis, daemons: int) -> str:
    """A prefix whose `jobs@bench-<i>` tags each land on a different primary (any, standalone)."""
    while True:
        prefix = f"d{uuid.uuid4().hex[:8]}"
        if not isinstance(redis, RedisCluster):
            return prefix
        await redis.initialize()
        tags = [queue_keys(f"jobs@bench-{i + 1}", prefix).tag for i in range(daemons)]
        owners = {redis.nodes_manager.get_node_from_slot(redis.keyslot(t)).name for t in tags}
        if len(owners) == daemons:
            return prefix


async def cluster_row(url: str, args: argparse.Namespace, tmp: Path) -> Row:
    """One daemon on one Redis, then three on a cluster of three primaries, side by side."""
    one = await drain_s(url, 1, args.drain, tmp / "one")
    with redis_cluster(3) as nodes:
        seeds = ",".join([nodes[0], *(n.split("://")[1].split("/")[0] for n in nodes[1:])])
        three = await drain_s(seeds, 3, args.drain, tmp / "three")
    return {
        "jobs": args.drain,
        "one_daemon_one_redis_per_s": round(args.drain / one),
        "three_daemons_three_primaries_per_s": round(args.drain / three),
        "ratio": round(one / three, 2),
    }


def ratios(out: Row) -> Row:
    """The targets' ratios, from the median of each size's reps (the reps alternate sizes, so
    each median is taken across the run, never from one stretch of the host's load)."""
    sizes, idle = out["sizes"], out["idle"]
    found: Row = {}
    by_size: dict[int, list[Row]] = {}
    for row in sizes:
        by_size.setdefault(row["queued"], []).append(row)
    if len(by_size) > 1:
        small, big = min(by_size), max(by_size)
        for k in ("client_cpu_us_per_job", "redis_cpu_us_per_job"):
            medians = [statistics.median(r[k] for r in by_size[n]) for n in (small, big)]
            found[f"{k} {big}/{small} (median of {len(by_size[big])})"] = round(
                medians[1] / medians[0], 2
            )
    if len(idle) > 1 and idle[0]["idle_cmds_per_s"]:
        found[f"idle_cmds_per_s {idle[-1]['queues']}/{idle[0]['queues']} queues"] = round(
            idle[-1]["idle_cmds_per_s"] / idle[0]["idle_cmds_per_s"], 2
        )
    if out.get("kept"):
        k = out["kept"]
        found["kept: last/first client_cpu_us_per_job"] = round(
            k["last_client_cpu_us_per_job"] / k["first_client_cpu_us_per_job"], 2
        )
    return found


async def main_async(args: argparse.Namespace) -> Row:
    with redis_server() as url, tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        redis = redis_client(url, 120)
        out: Row = {
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "python": platform.python_version(),
            "redis": await redis_version(url),
            "sample": args.sample,
            "sizes": [await fresh_size_row(n, args) for _ in range(args.reps) for n in args.sizes],
        }
        out["kept"] = await kept_row(redis, args) if args.kept else None
        out["idle"] = [await idle_row(url, redis, q, args, Path(tmp)) for q in args.queues]
        out["cluster"] = await cluster_row(url, args, Path(tmp)) if args.drain else None
        out["ratios"] = ratios(out)
        await redis.aclose()
        return out


def numbers(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=numbers, default=[1_000, 10_000, 100_000, 1_000_000])
    p.add_argument("--sample", type=int, default=10_000, help="jobs claimed and finished")
    p.add_argument("--reps", type=int, default=3, help="runs of every size, alternated")
    p.add_argument("--kept", type=int, default=1_000_000, help="finished jobs kept; 0: skip")
    p.add_argument("--queues", type=numbers, default=[1, 100, 1_000])
    p.add_argument("--idle-s", type=float, default=10.0)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--drain", type=int, default=30_000, help="jobs drained on 1 vs 3; 0: skip")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    out = uvloop.run(main_async(args))
    if args.json:
        print(json.dumps(out))
        return
    for name, value in out.items():
        if isinstance(value, list):
            print(f"{name}:")
            for row in value:
                print("  " + json.dumps(row))
        else:
            print(f"{name}: {json.dumps(value)}")


if __name__ == "__main__":
    main()
