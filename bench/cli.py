"""Wall time of the CLI's most used commands, as an operator's shell meets them.

    python -m bench.cli [--runs 20] [--warmup 3] [--jobs 1000] [--tree DIR] [--json]

Starts its own redis-server on a free port (no persistence) unless DISPATCH_REDIS_URL names
one, fills one queue with `--jobs` jobs the way `bench.fleet_view` does (mostly delayed, some
waiting, a tenth finished), then runs
each command as a child process of its own, the way hyperfine does: `--warmup` untimed runs,
then `--runs` timed ones, each from fork to exit. Prints mean, standard deviation, min, median
and max in ms, and the floor every command pays: the interpreter starting with nothing to do.

The children write their bytecode caches (PYTHONDONTWRITEBYTECODE is taken out of their
environment), as an operator's machine does: without them each run compiles every module it
loads again, some 30 ms here. `--tree DIR` runs another checkout's code (its folder goes first
on PYTHONPATH), to time a change's before beside its after.

Targets (issue 31): `dispatch submit` <= 150 ms, `dispatch jobs` <= 200 ms (medians).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.fleet_view import fill
from bench.support.redis import redis_server
from dispatch.queue import keys
from dispatch.queue.connect import open_redis

TARGETS_MS = {"submit": 150.0, "jobs": 200.0}


def commands(dispatch: str) -> dict[str, list[str]]:
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "submit": [dispatch, "submit", "--image", "bench:latest", "--", "true"],
        "jobs": [dispatch, "jobs"],
        "jobs --json": [dispatch, "jobs", "--json"],
    }


async def fill_queue(url: str, prefix: str, jobs: int) -> None:
    redis = await open_redis(url, 5.0)
    try:
        await fill(redis, prefix, jobs, hosts=3)
        await redis.sadd(keys.queues_registry(prefix), "jobs")  # as a first submit would
    finally:
        await redis.aclose()


def timed(argv: list[str], env: dict[str, str], runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        subprocess.run(argv, env=env, check=True, capture_output=True)
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "mean_ms": round(statistics.fmean(ms), 1),
        "sd_ms": round(statistics.stdev(ms), 1) if len(ms) > 1 else 0.0,
        "min_ms": round(min(ms), 1),
        "median_ms": round(statistics.median(ms), 1),
        "max_ms": round(max(ms), 1),
    }


def run(url: str, runs: int, warmup: int, jobs: int, tree: str = "") -> dict[str, dict[str, float]]:
    prefix = f"benchcli{uuid.uuid4().hex[:8]}"
    asyncio.run(fill_queue(url, prefix, jobs))
    env = {**os.environ, "DISPATCH_REDIS_URL": url, "DISPATCH_PREFIX": prefix}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    dispatch = str(Path(sys.executable).with_name("dispatch"))
    figures = {}
    for name, argv in commands(dispatch).items():
        figures[name] = summary(timed(argv, env, runs, warmup))
        if name in TARGETS_MS:
            figures[name]["target_ms"] = TARGETS_MS[name]
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--tree", default="", help="a checkout whose code the commands run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    given = os.environ.get("DISPATCH_REDIS_URL")
    if given:
        figures = run(given, args.runs, args.warmup, args.jobs, args.tree)
    else:
        with redis_server() as url:
            figures = run(url, args.runs, args.warmup, args.jobs, args.tree)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{'command':<16} {'mean':>7} {'sd':>6} {'min':>7} {'median':>7} {'max':>7} target")
    for name, f in figures.items():
        target = f"<= {f['target_ms']:.0f}" if "target_ms" in f else ""
        print(
            f"{name:<16} {f['mean_ms']:>7} {f['sd_ms']:>6} {f['min_ms']:>7} "
            f"{f['median_ms']:>7} {f['max_ms']:>7} {target}"
        )
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
