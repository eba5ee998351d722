"""One pickup's CPU in the gated processor, in-process: what each part of a no-op job's pickup
costs, free of the queue's round trips and the other daemons' noise.

    python -m bench.pickup [--pickups 20000] [--reps 7] [--without gates,usage,tails,log]
                           [--env N] [--json]

The processor is the gated daemon's (bench.queue --gates: every gate, an empty config dir, the
run log, the usage dirs, the Redis output tails) around bench.queue's no-op runner, on a
redis-server of its own (or DISPATCH_REDIS_URL). Each rep awaits `Processor.process` for the
same `--pickups` minimal jobs, one after the other; the figure is the fastest rep's
microseconds per pickup (on a shared host, noise only ever adds time). `--without` leaves
parts out, each in a pass of its own after the full one: the difference is what that part
costs a pickup. The runner's own no-op is included. `--env N` gives each job N env values
(agent jobs carry some; bench.queue's delayed jobs carry 2).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench.queue import PARTS, NoopRunner, parts_off
from bench.support.entry import run_and_print
from dispatch.clock import SystemClock
from dispatch.config.settings import Settings
from dispatch.config.watcher import ConfigFiles
from dispatch.daemon.assembly import gated_processor
from dispatch.daemon.processor import Processor
from dispatch.model import Job, encode_job, new_id
from dispatch.queue.connect import redis_client
from dispatch.queue.items import Claim
from dispatch.runners.base import AbortSignal

WARM_UP = 2_000


def claims(n: int, env: int = 0) -> list[Claim]:
    values = {f"SETTING_{i}": f"value-{i}" for i in range(env)}
    out: list[Claim] = []
    for _ in range(n):
        job_id = new_id()
        data = encode_job(Job(id=job_id, command=["true"], env=values))
        out.append(Claim("jobs", job_id, f"bench-1:{len(out) + 1}", 1, 0, 0, data))
    return out


async def fastest_us(processor: Processor, batch: list[Claim], reps: int) -> float:
    for claim in batch[:WARM_UP]:
        await processor.process(claim, AbortSignal())
    best = float("inf")
    for _ in range(reps):
        started = time.perf_counter()
        for claim in batch:
            await processor.process(claim, AbortSignal())
        best = min(best, time.perf_counter() - started)
    return best / len(batch) * 1e6


async def measure(url: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings(
        redis_url=url, embedded=False, prefix="pickup", host="bench-1",
        concurrency=50, state_dir=tmp,
    )  # fmt: skip
    redis = redis_client(url, 15)
    batch = claims(args.pickups, args.env)
    out: dict[str, Any] = {"pickups": args.pickups, "reps": args.reps, "env": args.env}
    passes: list[list[str]] = [[], *([part] for part in args.without)]
    if len(args.without) > 1:
        passes.append(args.without)
    try:
        for i, without in enumerate(passes):
            runner = NoopRunner(tmp / f"ran-{i}.txt")
            config = ConfigFiles(tmp / "config", SystemClock())
            async with gated_processor(settings, redis, runner, config) as processor:
                for part in without:
                    PARTS[part](processor)
                name = "full" if not without else "without " + "+".join(without)
                out[name + "_us"] = round(await fastest_us(processor, batch, args.reps), 2)
            ran = len(runner.ran())
            if ran != WARM_UP + args.reps * len(batch):  # a deferred or refused pickup
                raise SystemExit(f"{name}: {ran} of the pickups ran, not every one")
    finally:
        await redis.aclose()
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.pickup", description=__doc__.split("\n")[0])
    p.add_argument("--pickups", type=int, default=20_000, help="jobs per rep")
    p.add_argument("--reps", type=int, default=7, help="reps per pass; the fastest counts")
    p.add_argument(
        "--without", default="", help=f"parts to leave out, comma-separated: {','.join(PARTS)}"
    )
    p.add_argument("--env", type=int, default=0, help="env values each job carries")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    args.without = parts_off(p, args.without, PARTS, ",".join(PARTS))
    if args.env < 0:
        p.error("--env must be 0 or more")
    if args.pickups <= WARM_UP:
        p.error(f"--pickups must be over {WARM_UP}, the warm-up")
    return args


def main(argv: list[str] | None = None) -> None:
    run_and_print(measure, parse(argv), "pickup")


if __name__ == "__main__":
    main()
