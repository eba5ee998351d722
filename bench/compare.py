"""Dispatch against its peers (BullMQ, arq, SAQ) on bench.queue's no-op workload, one Redis.

    make bench-peers     # once: the peers into bench/peers/ (never dispatch's dependencies)
    python -m bench.compare [--configs c10,c50] [--systems dispatch,bullmq,...] [--reps 3]
                            [--jobs 20000] [--arq-poll-s 0.01] [--json]

One redis-server (bench.support.redis.redis_server), flushed before every run. For each config,
the reps alternate between systems, each rep starting one system later, so a loud spell on
the shared host falls on all of them alike. Every system runs one worker process with
concurrency C and is measured as `bench.queue` measures dispatch (phases: enqueue N into a
paused queue; process from the server instant of the resume to the last finish; 1,000 delayed
jobs spread over 5 s; 1,000 due at one instant; lateness = handler call minus due instant).

The systems and their settings (library defaults unless said):
  dispatch        bench.queue's daemon: no gates, in-process no-op runner.
  dispatch-gates  the same with every admission gate (`bench.queue --gates`).
  bullmq          BullMQ 6.7.0 on ioredis 6.0.0, one Queue and one Worker(concurrency=C) in one
                  Node process; paused with queue.pause(), enqueued by addBulk in 500s, resumed
                  at "go". Completed jobs are kept (its default: no removeOnComplete).
  arq             arq 0.28.0, Worker(max_jobs=C) on uvloop. No pause, so the jobs go in before
                  the worker starts at "go". poll_delay is 0.01 s, not its 0.5 s default: at 0.5 s
                  the sleep between polls, not arq, sets throughput (about 200 jobs/s at c10,
                  5 s burst lateness); `--arq-poll-s 0.5` measures the default.
  saq             SAQ 0.26.4, Worker(concurrency=C) on uvloop. No pause: as arq. Its delayed
                  jobs move to the queue on its 1 s schedule timer (default), which bounds their
                  lateness; its throughput has no poll (BLMOVE per slot).

Steal. A run whose host lost more than `--max-steal` percent of a core to steal over its process
phase says little about anyone: it is run again, up to `--reruns` times, once the host has
been quieter for a second (looked at for 60 s at most). The last try counts whatever its steal;
the stolen runs are kept in the JSON (`stolen`) and counted under the table.

Finish instants come from each peer's own records (BullMQ job.finishedOn, SAQ job.completed,
arq after_job_end once the result is stored; dispatch's done score). Worker CPU is the worker
process's utime + stime over the process phase; for a peer that process also holds the
(idle) producer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from redis.asyncio import Redis

from bench.peers.harness import PEERS, measure_peer
from bench.peers.table import SYSTEMS, quiet, ratios, render, rotation, summarize
from bench.queue import measure
from bench.queue import parse as queue_args
from bench.support.cpu import machine_cpu_s
from bench.support.redis import redis_server, redis_version

Row = dict[str, Any]
CONFIGS = {"c10": 10, "c50": 50}
NOT_INSTALLED = "not installed (run make bench-peers)"


async def run_one(
    system: str, url: str, concurrency: int, args: argparse.Namespace, tmp: Path
) -> Row:
    if system.startswith("dispatch"):
        argv = ["--jobs", str(args.jobs), "--concurrency", str(concurrency)]
        argv += ["--idle-s", str(args.idle_s)] + (["--gates"] if system.endswith("gates") else [])
        row = await measure(queue_args(argv), url, tmp)
        row["worker_cpu_us_per_job"] = row["daemon_cpu_us_per_job"]
        return row
    cfg: Row = {"concurrency": concurrency, "jobs": args.jobs}
    if system == "arq":
        cfg["poll_s"] = args.arq_poll_s
    return await measure_peer(PEERS[system], url, cfg, tmp)


Runs = dict[str, list[Row]]


async def run_config(
    name: str, systems: list[str], args: argparse.Namespace, url: str, tmp: Path
) -> tuple[Runs, dict[str, list[str]], Runs]:
    """Every system's reps at one config, alternated; a failed run is noted, not fatal, and
    a stolen one is run again (module docstring)."""
    rows: Runs = {s: [] for s in systems}
    stolen: Runs = {}
    failed: dict[str, list[str]] = {}
    redis = Redis.from_url(url)
    try:
        for rep, order in enumerate(rotation(systems, args.reps), start=1):
            for system in order:
                for tries_left in range(args.reruns, -1, -1):
                    await redis.flushall()
                    try:
                        row = await run_one(system, url, CONFIGS[name], args, tmp)
                    except (Exception, SystemExit) as e:  # bench.queue says why with SystemExit
                        failed.setdefault(system, []).append(str(e))
                        print(f"{name} rep {rep} {system}: failed: {e}", file=sys.stderr)
                        break
                    said = f"{row['processed_per_s']:,} jobs/s, steal {row['steal_pct']}%"
                    print(f"{name} rep {rep} {system}: {said}", file=sys.stderr, flush=True)
                    if quiet(row, args.max_steal) or not tries_left:
                        rows[system].append(row)
                        break
                    stolen.setdefault(system, []).append(row)
                    await calm(args.max_steal)
    finally:
        await redis.aclose()
    return rows, failed, stolen


async def calm(max_steal: float, within_s: float = 60.0) -> None:
    """Wait until a second passes with steal under `max_steal` percent, `within_s` at most."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        _, before = machine_cpu_s()
        await asyncio.sleep(1.0)
        _, after = machine_cpu_s()
        if (after - before) * 100 < max_steal:
            return


async def main_async(args: argparse.Namespace) -> Row:
    versions = {s: PEERS[s].version() for s in args.systems if s in PEERS}
    missing = {s: NOT_INSTALLED for s, v in versions.items() if v is None}
    systems = [s for s in args.systems if s not in missing]
    out: Row = {
        "jobs": args.jobs,
        "reps": args.reps,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": platform.python_version(),
        "versions": {s: v for s, v in versions.items() if v is not None},
        "arq_poll_s": args.arq_poll_s,
        "max_steal_pct": args.max_steal,
        "not_installed": missing,
        "configs": {},
    }
    with redis_server() as url, tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        out["redis"] = await redis_version(url)
        for name in args.configs:
            rows, failed, stolen = await run_config(name, systems, args, url, Path(tmp))
            summary = summarize(rows)
            result = {"summary": summary, "ratios": ratios(summary), "failed": failed}
            out["configs"][name] = {**result, "runs": rows, "stolen": stolen}
    return out


def systems_list(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = set(names) - set(SYSTEMS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown: {', '.join(sorted(unknown))}")
    return names


def configs_list(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if set(names) - CONFIGS.keys():
        raise argparse.ArgumentTypeError(f"configs are {', '.join(CONFIGS)}")
    return names


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    p.add_argument("--configs", type=configs_list, default=list(CONFIGS), help="c10,c50")
    p.add_argument("--systems", type=systems_list, default=list(SYSTEMS), help=",".join(SYSTEMS))
    p.add_argument("--reps", type=int, default=3, help="runs of each system per config")
    p.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per run")
    p.add_argument("--idle-s", type=float, default=0.5, help="dispatch's idle window (bench.queue)")
    p.add_argument("--arq-poll-s", type=float, default=0.01, help="arq's poll_delay (default 0.5)")
    p.add_argument("--max-steal", type=float, default=10.0, help="steal %% over which to rerun")
    p.add_argument("--reruns", type=int, default=2, help="reruns of a stolen run, at most")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    out = uvloop.run(main_async(args))
    if args.json:
        print(json.dumps(out))
        return
    print("\n".join(render(out)))


if __name__ == "__main__":
    main()
