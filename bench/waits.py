"""Waits: many jobs held on a wait profile that keeps answering "not yet", on two daemons.

    python -m bench.waits [--jobs 1000] [--warmup-s 20] [--seconds 60] [--slots 1]
                          [--fleet 2] [--check-ms 20] [--json]

The bench starts its own redis-server and two daemons (`python -m dispatch worker`, process
runner, concurrency 4, DISPATCH_WAIT_INTERVAL 30s, DISPATCH_WAIT_CHECK_SLOTS `--slots`,
DISPATCH_WAIT_FLEET_CHECKS `--fleet`), declares one profile, a shell script that appends
`start` and `end` around a `--check-ms` sleep to a shared file and exits 3, and enqueues
`--jobs` forge jobs waiting on it. After `--warmup-s` (the first burst, when every job is due
at once and most are throttled) it measures for `--seconds`:

  checks_per_s          checks ended per second, fleet-wide
  slots                 checks allowed at once: per host min(slots, concurrency - 1), both
                        hosts, and the fleet lease's bound
  demand_per_s          jobs / the mean interval between a job's checks (about 31.5 s)
  redis_cmds_per_check  every Redis command in the window (INFO commandstats) per check:
                        the claims, finishes and deferrals of the held jobs included
  daemon_cpu_ms_per_check   both daemons' own CPU (utime + stime, not their children's) per check
  max_concurrent_checks over the whole run, from the start/end marks; must not exceed the fleet
                        bound (`fleet_bound_exceeded`)
  throttled, held       deferrals `wait-throttled` and `wait-hold` in the daemons' logs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import uvloop
from redis.asyncio import Redis

from bench.support.children import Children, Daemon, children, daemon_env, start_redis
from bench.support.cpu import process_cpu_s
from bench.support.redis import command_calls
from dispatch.model import Job, WaitFor, encode_job, new_id
from dispatch.queue.transitions import NewJob, Queue

CONCURRENCY = 4
GATE = WaitFor(profile="gate")
INTERVAL_S = 30


@dataclass
class Row:
    jobs: int
    seconds: float
    checks: int
    checks_per_s: float
    slots: str
    demand_per_s: float
    redis_cmds_per_check: float
    top_cmds_per_check: dict[str, float]
    daemon_cpu_ms_per_check: float
    max_concurrent_checks: int
    fleet_bound_exceeded: bool
    throttled: int
    held: int


def check_script(work: Path, marks: Path, check_ms: int) -> Path:
    script = work / "check.sh"
    sleep = f"{check_ms / 1000:.3f}"
    script.write_text(
        f"#!/bin/sh\necho start >> {marks}\nsleep {sleep}\necho end >> {marks}\nexit 3\n"
    )
    script.chmod(0o755)
    return script


def start_daemons(
    kids: Children, url: str, prefix: str, work: Path, args: argparse.Namespace
) -> None:
    script = check_script(work, work / "marks", args.check_ms)
    for host in ("w1", "w2"):
        state = work / host
        (state / "config").mkdir(parents=True)
        profiles = {"version": 1, "profiles": {"gate": {"command": [str(script), "{target}"]}}}
        (state / "config" / "wait-profiles.json").write_text(json.dumps(profiles))
        env = daemon_env(url, prefix, state, host)
        env.update(
            DISPATCH_RUNNER="process",
            DISPATCH_CONCURRENCY=str(CONCURRENCY),
            DISPATCH_WAIT_INTERVAL=f"{INTERVAL_S}s",
            DISPATCH_WAIT_CHECK_SLOTS=str(args.slots),
        )
        if args.fleet:
            env["DISPATCH_WAIT_FLEET_CHECKS"] = str(args.fleet)
        daemon = Daemon(host, state, env)
        daemon.start()
        kids.daemons.append(daemon)


async def enqueue(redis: Redis, prefix: str, n: int) -> None:
    queue = Queue(redis, "jobs", prefix)
    for start in range(0, n, 200):
        numbers = range(start + 1, min(start + 200, n) + 1)
        batch = [
            Job(id=new_id(), kind="forge", repo="a/b", number=k, wait_for=[GATE]) for k in numbers
        ]
        await queue.enqueue([NewJob(j.id, encode_job(j)) for j in batch])


async def commands(redis: Redis) -> Counter[str]:
    """Calls per command so far, a script's own calls counted like a client's (INFO left out)."""
    return Counter(await command_calls(redis))


def ends(marks: Path) -> int:
    return marks.read_text().count("end") if marks.exists() else 0


def most_at_once(marks: Path) -> int:
    running = most = 0
    for line in marks.read_text().split():
        running += 1 if line == "start" else -1
        most = max(most, running)
    return most


def deferrals(work: Path, reason: str) -> int:
    needle = f'"reason":"{reason}"'
    return sum((work / h / "daemon.log").read_text().count(needle) for h in ("w1", "w2"))


async def measure(args: argparse.Namespace, kids: Children, work: Path) -> Row:
    url = start_redis(kids, work)
    prefix = "bench"
    redis = Redis.from_url(url)
    try:
        start_daemons(kids, url, prefix, work, args)
        await enqueue(redis, prefix, args.jobs)
        await asyncio.sleep(args.warmup_s)
        pids = [d.pid for d in kids.daemons]
        marks = work / "marks"
        before = (await commands(redis), process_cpu_s(pids), ends(marks), time.monotonic())
        await asyncio.sleep(args.seconds)
        after = (await commands(redis), process_cpu_s(pids), ends(marks), time.monotonic())
    finally:
        await redis.aclose()
    checks = max(after[2] - before[2], 1)
    elapsed = after[3] - before[3]
    per_host = max(1, min(args.slots, CONCURRENCY - 1))
    most = most_at_once(marks)
    bound = args.fleet or 2 * per_host
    return Row(
        jobs=args.jobs,
        seconds=round(elapsed, 1),
        checks=checks,
        checks_per_s=round(checks / elapsed, 1),
        slots=f"{per_host}/host x 2, fleet {args.fleet or 'unbounded'}",
        demand_per_s=round(args.jobs / (INTERVAL_S * 1.05), 1),
        redis_cmds_per_check=round((after[0] - before[0]).total() / checks, 1),
        top_cmds_per_check={
            name: round(n / checks, 1) for name, n in (after[0] - before[0]).most_common(8)
        },
        daemon_cpu_ms_per_check=round((after[1] - before[1]) * 1000 / checks, 2),
        max_concurrent_checks=most,
        fleet_bound_exceeded=most > bound,
        throttled=deferrals(work, "wait-throttled"),
        held=deferrals(work, "wait-hold"),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--warmup-s", type=float, default=20)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--fleet", type=int, default=2)
    p.add_argument("--check-ms", type=int, default=20)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-waits-") as tmp, children() as kids:
        row = uvloop.run(measure(args, kids, Path(tmp)))
    if args.json:
        print(json.dumps(asdict(row)))
    else:
        for name, value in asdict(row).items():
            print(f"{name:<26} {value}")
    sys.exit(1 if row.fleet_bound_exceeded else 0)


if __name__ == "__main__":
    main()
