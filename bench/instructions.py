"""The daemon's instructions a job, counted by valgrind: a figure this host's noise cannot move.

    python -m bench.instructions [--gates [--without PARTS]] [--concurrency 10,50]
                                 [--jobs 1000,4000] [--cache] [--json]

Seconds on this shared host move by a third between reps (bench/results/issue-31-round-6.md),
so a cut worth 1-3% of a job is lost in any timed bench. Valgrind's cachegrind counts the
instructions a process executes instead, and those repeat to within about 0.5% run to run.

Each concurrency runs bench.queue's daemon (`--gates`: every gate, on an empty config dir)
under cachegrind twice, over each of `--jobs`' two counts of no-op jobs, on a redis-server of
the bench's own (or DISPATCH_REDIS_URL). The figure is the difference in instructions over the
difference in jobs: the daemon's start, idle and stop cancel out. `--cache` adds cachegrind's
simulated cache misses and branch mispredictions a job (its model of a CPU, not this one's).
`--without` takes parts off the gated daemon (bench.queue's PARTS: gates, usage, tails, log;
or one gate, `gate:size`): the difference from the whole is what that part costs a job.

Under valgrind the daemon runs about a hundred times slower, so its time constants (a waiting
claim's hold, the fast-run mark, the endings' gather and the cohort hold) are scaled by
`SCALE` in its own process. Unscaled, a small host would cool and hand its waiting claims
back, a shape it never takes at native speed, and the count would be of that. Redis runs
natively: run under valgrind too, it moved the figure by under 0.3%.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import shutil
import sys
import uuid
from multiprocessing import spawn
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bench.queue import (
    PARTS,
    DaemonSpec,
    Fleet,
    daemon_main,
    drained,
    enqueue,
    gate_names,
    parts_off,
    plain_jobs,
)
from bench.support.entry import run_and_print
from dispatch.queue.transitions import Queue

SCALE = 100.0
START_S = 300.0  # a daemon's start under valgrind: about 20 s here
EVENTS = {  # cachegrind's event names, and the figures' (the misses with --cache only)
    "Ir": "instructions",
    "I1mr": "i1_misses",
    "D1mr": "d1_read_misses",
    "D1mw": "d1_write_misses",
    "Bcm": "cond_mispredicts",
    "Bim": "ind_mispredicts",
}


def scaled_daemon_main(spec: DaemonSpec, stop_flag: Any, out: Any) -> None:
    """bench.queue's daemon with its time constants scaled for valgrind's pace."""
    from dispatch.daemon import ahead, capacity, flights, lane

    ahead.HOLD_S *= SCALE
    capacity.FAST_RUN_S *= SCALE
    flights.GATHER_S *= SCALE
    lane.HOLD_S *= SCALE
    daemon_main(spec, stop_flag, out)


def wrapper(folder: Path, cache: bool) -> Path:
    """An executable that runs Python under cachegrind, each process writing `cg.<pid>`."""
    sim = "--cache-sim=yes --branch-sim=yes" if cache else "--cache-sim=no"  # on by default in 3.19
    script = folder / "python-under-cachegrind"
    script.write_text(
        "#!/bin/sh\n"
        f"exec valgrind --tool=cachegrind {sim} --log-file={folder}/vg.%p"
        f' --cachegrind-out-file={folder}/cg.%p {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return script


def counts(path: Path) -> dict[str, int]:
    """The totals of one cachegrind out file, by event name."""
    events: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            return dict(zip(events, map(int, line.split()[1:]), strict=True))
    raise SystemExit(f"{path}: no summary line (did valgrind finish?)")


async def one_run(
    url: str, tmp: Path, jobs: int, concurrency: int, args: argparse.Namespace
) -> int:
    """Run `jobs` no-op jobs through one daemon under the wrapper; its process id."""
    redis = Redis.from_url(url)
    prefix = f"instr{uuid.uuid4().hex[:8]}"
    fleet = Fleet(
        url, prefix, 1, concurrency, tmp, args.gates, None, scaled_daemon_main, args.without
    )
    queue = Queue(redis, "jobs", prefix)
    try:
        await fleet.start(redis, settle_s=0, within_s=START_S)
        await enqueue(queue, plain_jobs(jobs), 500)
        await drained(queue, timeout_s=START_S + jobs * 0.05)
        [row] = await asyncio.get_running_loop().run_in_executor(None, fleet.stop)
    finally:
        await redis.aclose()
    if len(row["ids"]) != jobs:
        raise SystemExit(f"{len(row['ids'])} of {jobs} jobs ran")
    [pid] = [p.pid for p in fleet.procs]
    assert pid is not None
    return pid


async def per_job(
    url: str, folder: Path, args: argparse.Namespace, concurrency: int
) -> dict[str, int]:
    """Each event a job at one concurrency: the two runs' difference over their jobs'."""
    totals = []
    for jobs in args.jobs:
        pid = await one_run(url, folder / f"c{concurrency}-{jobs}", jobs, concurrency, args)
        totals.append(counts(folder / f"cg.{pid}"))
    small, large = totals
    extra = args.jobs[1] - args.jobs[0]
    return {EVENTS[e]: round((large[e] - small[e]) / extra) for e in EVENTS if e in large}


async def measure(url: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    daemon = "every gate" if args.gates else "no gates"
    if args.without:
        daemon += f" without {', '.join(args.without)}"
    out: dict[str, Any] = {"daemon": daemon, "jobs": args.jobs}
    before = spawn.get_executable()
    mp.set_executable(str(wrapper(folder, args.cache)))
    try:  # the executable is the process's: put back for whatever spawns after
        for concurrency in args.concurrency:
            for name, value in (await per_job(url, folder, args, concurrency)).items():
                out[f"c{concurrency} {name}_per_job"] = value
    finally:
        mp.set_executable(before)
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.instructions", description=__doc__.split("\n")[0]
    )
    p.add_argument("--gates", action="store_true", help="every admission gate, as bench.queue")
    p.add_argument(
        "--without", default="", help=f"with --gates: parts off ({','.join(PARTS)}, gate:NAME)"
    )
    p.add_argument("--concurrency", default="10,50", help="slots, comma-separated")
    p.add_argument("--jobs", default="1000,4000", help="the two runs' job counts")
    p.add_argument("--cache", action="store_true", help="simulated cache and branch misses too")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    args.concurrency = _counts(p, "--concurrency", args.concurrency)
    args.jobs = _counts(p, "--jobs", args.jobs)
    known = {*PARTS, *(f"gate:{name}" for name in gate_names())}
    args.without = tuple(parts_off(p, args.without, known, f"{','.join(PARTS)}, or gate:NAME"))
    if args.without and not args.gates:
        p.error("--without takes parts off the gated daemon: give --gates too")
    if len(args.jobs) != 2 or args.jobs[0] >= args.jobs[1]:
        p.error("--jobs takes two counts, the smaller first")
    if shutil.which("valgrind") is None:
        p.error("valgrind not found (apt-get install valgrind)")
    return args


def _counts(p: argparse.ArgumentParser, flag: str, text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        p.error(f"{flag} {text}: not whole numbers, comma-separated")
    if any(v < 1 for v in values):
        p.error(f"{flag} {text}: each must be 1 or more")
    return values


def main(argv: list[str] | None = None) -> None:
    run_and_print(measure, parse(argv), "instr")


if __name__ == "__main__":
    main()
