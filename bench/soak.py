"""Soak: short jobs through three real daemons while the bench kills, freezes and pauses them.

    python -m bench.soak [--jobs 2000] [--submit-s 30] [--deadline-s 600] [--seed N] [--json]
                         [--keep] [--concurrency 8] [--runs 1] [--ahead]

The 40-slot profile: `--concurrency 40 --jobs 3000 --runs 10`, ten soaks in a row (seeds
`--seed`, `--seed`+1, ...), one line of figures each and the count of runs that were not four
zeros; the exit is 1 if any was not.

The bench starts its own redis-server (free loopback port, no persistence) and three daemons
as an operator would, `python -m dispatch worker` with the process runner, host names
soak-1..3, a state dir each (the daemon's stdout and stderr go to `daemon.log` there). Jobs go
to the shared queue `jobs` through the client's queue (`Queue.enqueue`), `--batch` per call,
the batches spread evenly over `--submit-s` (30 s), so a run of any size meets the whole
fault plan below (a shorter `--submit-s` may end the soak before the plan). Each job's command
appends its start and end instants to a marks file named by its job id, with `sleep
--sleep-s` between (`bench/soak_runs.py` says exactly what is counted from the marks).

Faults, from the first submit until every job has ended:
  kill    every 4-6 s (seeded), the next daemon in turn that is not frozen is SIGKILLed,
          reaped, and started again with the same host name and state dir;
  freeze  at 1, 11 and 21 s, a daemon that is not frozen is SIGSTOPped for 2 x lock (6 s),
          then SIGCONTed: its claims lapse while it cannot renew them, and its runs go on;
  pause   at 8, 18 and 28 s, redis-server is SIGSTOPped for 2, 4.5 (longer than the lock)
          and 2.5 s, then SIGCONTed.
A daemon that exits on its own is started again and counted (`daemon_exits`): a finding.

Settings, through the daemons' ordinary environment: lock 3 s, stop grace 0.5 s, renewal
every 0.5 s, sweep every 1 s, concurrency 8 (`--concurrency 40` runs two cohorts per daemon
and their two flights, daemon/flights.py). `--ahead` has every daemon claim ahead however long
its runs take (bench/support/ahead_worker.py), so the faults meet claims waiting for a slot and
their hand-backs (`waiting_claims_handed_back` in the events). `DISPATCH_MAX_STALLS` keeps its
default: a stall is a lock that lapsed, which a kill or a freeze causes for each claim of that
daemon, and the faults issue's rule is that a fault never fails a job, so a job failed
`stalled` here counts in `failed_for_faults`. `stalls_max` says how close the fleet came to the cap.

Figures, the first four should be 0:
  lost                 jobs with no final state when the run ended (every job ended, or the
                       deadline passed);
  completed_twice      jobs whose command reached its end more than once with no kill or
                       freeze of the first run's daemon to explain it (a defect);
  overlapping_runs     pairs of runs of one job that overlapped in time;
  failed_for_faults    jobs whose final state is failed (reasons in `failed_reasons`);
  wall_s, jobs_per_s   first submit to the last job's end (as polled, when some are lost);
                       completed jobs over that, so bounded by the submission rate
                       (jobs / submit_s): `--submit-s 0` submits at once, for throughput;
  kills, freezes, redis_pauses   faults injected;
  reran_unreported     jobs whose command reached its end, then ran again because its
                       daemon was killed or frozen before the outcome reached Redis (at
                       least once: no supervisor closes that window; see bench/soak_runs.py);
  reruns_by_cause      what came between a job's first ended run and its next run;
  runs_after_done      runs that started after their job's final result was written;
  orphan_runs          runs whose daemon was gone before they started;
  completed_without_end_mark   completed in Redis with no end in the marks;
  daemon_events        the daemons' log events other than start and stop.

Cleanup: every child (redis-server, daemons) gets a parent-death SIGKILL and is killed when
the bench exits, on Ctrl-C, SIGTERM or an error too (bench/support/children.py); the work dir
(marks, state dirs with the daemons' logs, `evidence.json` with the faults' instants) is
removed unless `--keep`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import uvloop
from redis.asyncio import Redis
from redis.exceptions import RedisError

from bench.soak_runs import Evidence, Fault, Tally, command, tally
from bench.support.children import (
    DAEMON_ENV,
    LOCK_MS,
    Children,
    Daemon,
    children,
    daemon_env,
    start_redis,
)
from bench.support.redis import redis_version
from dispatch import Client, Job, new_id
from dispatch.config.settings import from_env
from dispatch.model import Result, encode_job
from dispatch.queue.connect import redis_client
from dispatch.queue.items import Retention
from dispatch.queue.keys import host_alive, queue_keys
from dispatch.queue.transitions import NewJob, Queue
from dispatch.records.disk_log import decode as decode_record

Row = dict[str, Any]
DAEMONS = 3
AHEAD_WORKER = "bench.support.ahead_worker"  # `--ahead`: claims ahead whatever runs take
KILL_EVERY_S = (4.0, 6.0)
FREEZE_AT_S = (1.0, 11.0, 21.0)
FREEZE_S = 2 * LOCK_MS / 1000
PAUSES_S = ((8.0, 2.0), (18.0, 4.5), (28.0, 2.5))  # (at, for): between the freezes
CLIENT_TIMEOUT_S = 10.0  # longer than any pause: the bench's calls wait one out
POLL_S = 0.25
PROGRESS_S = 10.0
BENIGN = {"daemon_starting", "worker_started", "worker_draining", "worker_stopped"}
_result = msgspec.json.Decoder(Result)


# -- the faults -------------------------------------------------------------------------------


@dataclass
class Soak:
    args: argparse.Namespace
    kids: Children
    work: Path
    rng: random.Random
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    t0: float = field(default_factory=time.monotonic)  # the first submit
    t0_ns: int = field(default_factory=time.time_ns)  # the same instant on the wall clock
    faults: list[Fault] = field(default_factory=list)
    gone_ns: dict[int, int] = field(default_factory=dict)  # daemon pid -> seen reaped
    frozen: set[str] = field(default_factory=set)
    exits: list[str] = field(default_factory=list)  # daemons that exited on their own

    @property
    def daemons(self) -> list[Daemon]:
        return self.kids.daemons

    async def stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), max(seconds, 0.0))
        return self.stop.is_set()

    async def stopped_before(self, at_s: float) -> bool:
        """Wait until `at_s` after the first submit; True if the soak ended first."""
        return await self.stopped_within(self.t0 + at_s - time.monotonic())

    def free(self, after: int) -> Daemon | None:
        """The first daemon after index `after` (in turn) that is neither frozen nor dying."""
        for i in range(1, DAEMONS + 1):
            d = self.daemons[(after + i) % DAEMONS]
            if d.host not in self.frozen and not d.expected_exit:
                return d
        return None


async def killer(s: Soak) -> None:
    turn = -1
    while not await s.stopped_within(s.rng.uniform(*KILL_EVERY_S)):
        d = s.free(turn)
        if d is None:
            continue
        turn = s.daemons.index(d)
        d.expected_exit = True
        pid, start_ns = d.pid, time.time_ns()
        d.send(signal.SIGKILL)
        await d.gone()
        s.gone_ns[pid] = time.time_ns()
        d.start()
        s.faults.append(Fault("kill", d.host, pid, start_ns, s.gone_ns[pid]))


async def freezer(s: Soak) -> None:
    for i, at in enumerate(FREEZE_AT_S):
        if await s.stopped_before(at):
            return
        d = s.free(DAEMONS - 1 - i)
        if d is None:
            continue
        s.frozen.add(d.host)
        pid, start_ns = d.pid, time.time_ns()
        d.send(signal.SIGSTOP)
        try:
            await s.stopped_within(FREEZE_S)
        finally:
            d.send(signal.SIGCONT)
            s.frozen.discard(d.host)
            s.faults.append(Fault("freeze", d.host, pid, start_ns, time.time_ns()))


async def pauser(s: Soak) -> None:
    redis = s.kids.redis
    assert redis is not None
    for at, seconds in PAUSES_S:
        if await s.stopped_before(at):
            return
        start_ns = time.time_ns()
        redis.send_signal(signal.SIGSTOP)
        try:
            await s.stopped_within(seconds)
        finally:
            redis.send_signal(signal.SIGCONT)
            s.faults.append(Fault("pause", "redis", redis.pid, start_ns, time.time_ns()))


async def watchdog(s: Soak) -> None:
    """Start again a daemon that exited when the bench did not ask it to."""
    while not await s.stopped_within(0.5):
        for d in s.daemons:
            if d.proc is not None and d.proc.poll() is not None and not d.expected_exit:
                s.gone_ns[d.pid] = time.time_ns()
                s.exits.append(f"{d.host} pid {d.pid} exit {d.proc.returncode}")
                d.start()


# -- the jobs ---------------------------------------------------------------------------------


async def retried(call: Callable[[], Awaitable[Any]], until: float) -> Any:
    """The bench's own calls outlast a fault: a Redis error is retried after a moment, until
    the monotonic instant `until` (then the bench gives up)."""
    while True:
        try:
            return await call()
        except (RedisError, OSError) as exc:
            if time.monotonic() > until:
                raise SystemExit(f"soak: Redis still fails at the deadline: {exc}") from None
            print(f"soak: redis error, retrying: {exc}", file=sys.stderr)
            await asyncio.sleep(0.5)


async def submit(s: Soak, queue: Queue, marks: Path, ids: list[str]) -> None:
    """Enqueue in batches spread evenly from 0 to `--submit-s`; a retried batch is harmless (an
    id already there is not made again)."""
    batch = s.args.batch
    every_s = s.args.submit_s / max((len(ids) - 1) // batch, 1)  # the last batch at submit_s
    for n, i in enumerate(range(0, len(ids), batch)):
        await asyncio.sleep(s.t0 + n * every_s - time.monotonic())
        jobs = [
            NewJob(j, encode_job(Job(id=j, command=command(marks / j, s.args.sleep_s))))
            for j in ids[i : i + batch]
        ]
        await retried(partial(queue.enqueue, jobs), s.t0 + s.args.deadline_s)


async def wait_ended(s: Soak, redis: Redis, n: int) -> float:
    """Poll until `n` jobs are done or the deadline passes; the seconds it took, as seen."""
    done_key = queue_keys("jobs", s.args.prefix).done
    deadline = s.t0 + s.args.deadline_s
    next_note = 0.0
    while True:
        ended = int(await retried(lambda: redis.zcard(done_key), deadline))
        now = time.monotonic()
        if ended >= n or now > deadline:
            return now - s.t0
        if now >= next_note:
            next_note = now + PROGRESS_S
            kinds = Counter(f.kind for f in s.faults)
            print(f"soak: {now - s.t0:5.0f} s  ended {ended}/{n}  {dict(kinds)}", file=sys.stderr)
        await asyncio.sleep(POLL_S)


@dataclass
class Final:
    """Each job's final result, stall count and instant it was done (server ms), if any."""

    results: list[Any]
    stalls: list[Any]
    done_ms: dict[str, int | None]


async def final_states(redis: Redis, prefix: str, ids: list[str]) -> Final:
    k = queue_keys("jobs", prefix)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hmget(k.result, ids)
        pipe.hmget(k.stalls, ids)
        pipe.zmscore(k.done, ids)
        results, stalls, done = await pipe.execute()
    done_ms = {i: int(ms) if ms is not None else None for i, ms in zip(ids, done, strict=True)}
    return Final(results, stalls, done_ms)


# -- the run ----------------------------------------------------------------------------------


async def start_fleet(s: Soak, url: str, redis: Redis) -> None:
    for i in range(DAEMONS):
        host = f"soak-{i + 1}"
        state = s.work / host
        state.mkdir()
        env = daemon_env(url, s.args.prefix, state, host)
        env["DISPATCH_CONCURRENCY"] = str(s.args.concurrency)
        d = Daemon(host, state, env, module=AHEAD_WORKER if s.args.ahead else "dispatch")
        s.daemons.append(d)
        d.start()
    alive = [host_alive(d.host, s.args.prefix) for d in s.daemons]
    deadline = time.monotonic() + 30
    while await redis.exists(*alive) < len(alive):
        if time.monotonic() > deadline:
            raise SystemExit("soak: the daemons did not start within 30 s")
        await asyncio.sleep(0.05)


async def stop_fleet(s: Soak) -> None:
    """Let every daemon go gracefully (they are idle by now); kill what will not stop."""
    for d in s.daemons:
        d.expected_exit = True
        d.send(signal.SIGCONT)
        d.send(signal.SIGTERM)
    for d in s.daemons:
        if not await d.gone(30.0):
            d.send(signal.SIGKILL)
            await d.gone()
        s.gone_ns[d.pid] = time.time_ns()


async def run(args: argparse.Namespace, kids: Children, work: Path) -> Row:
    url = start_redis(kids, work)
    s = Soak(args, kids, work, random.Random(args.seed))
    client = Client(redis_client(url, CLIENT_TIMEOUT_S), args.prefix, host="soak-bench")
    marks = work / "marks"
    marks.mkdir()
    ids = [new_id() for _ in range(args.jobs)]
    try:
        await start_fleet(s, url, client.redis)
        s.t0, s.t0_ns = time.monotonic(), time.time_ns()
        loops = [asyncio.create_task(f(s)) for f in (killer, freezer, pauser, watchdog)]
        try:
            await submit(s, client.queue("jobs"), marks, ids)
            wall_s = await wait_ended(s, client.redis, args.jobs)
        finally:
            s.stop.set()
            await asyncio.gather(*loops)
        await stop_fleet(s)
        final = await final_states(client.redis, args.prefix, ids)
        out = {"redis": await redis_version(url)}
    finally:
        await client.redis.aclose()
    host_of = {pid: d.host for d in s.daemons for pid in d.pids}
    evidence = Evidence(s.faults, s.gone_ns, host_of, stopped_runs(s.daemons))
    save_evidence(s, evidence, final)
    out.update(figures(s, ids, final, tally(marks, final.done_ms, evidence), wall_s))
    return out


def stopped_runs(daemons: list[Daemon]) -> dict[tuple[str, str], list[int]]:
    """(job, host) -> when each of its runs there that did not end on its own was gone
    (the record's end, rounded up to the next millisecond), from the hosts' local run logs."""
    ends: dict[tuple[str, str], list[int]] = {}
    for d in daemons:
        path = d.state / "runs.jsonl"
        for line in path.read_bytes().splitlines() if path.exists() else []:
            record = decode_record(line)
            stopped = record.kill is not None or record.exit_code not in (0, None)
            if record.started_at and record.ended_at and stopped:
                ended_ns = (_epoch_ms(record.ended_at) + 1) * 1_000_000
                ends.setdefault((record.id, d.host), []).append(ended_ns)
    return ends


def _epoch_ms(instant: str) -> int:
    return round(datetime.fromisoformat(instant).timestamp() * 1000)


def save_evidence(s: Soak, evidence: Evidence, final: Final) -> None:
    """What the marks alone do not say, for a look afterwards (`--keep`)."""
    saved = {
        "faults": evidence.faults,
        "gone_ns": evidence.gone_ns,
        "daemon_pids": {d.host: d.pids for d in s.daemons},
        "stopped_ns": [[job, host, ns] for (job, host), ns in evidence.stopped_ns.items()],
        "done_ms": final.done_ms,
    }
    (s.work / "evidence.json").write_bytes(msgspec.json.encode(saved))


def figures(s: Soak, ids: list[str], states: Final, runs: Tally, seen_s: float) -> Row:
    final = {i: _result.decode(raw) for i, raw in zip(ids, states.results, strict=True) if raw}
    done = [ms for ms in states.done_ms.values() if ms is not None]
    # to the last job's end (server clock, same machine) when all ended; else as polled
    wall_s = (max(done) * 1_000_000 - s.t0_ns) / 1e9 if len(done) == len(ids) else seen_s
    completed = {i for i, r in final.items() if r.state == "completed"}
    failed = Counter(r.reason for r in final.values() if r.state == "failed")
    stall_counts = [int(x or 0) for x in states.stalls]
    default_cap = from_env({}).max_stalls
    kinds = Counter(f.kind for f in s.faults)
    return {
        "lost": len(ids) - len(final),
        "completed_twice": runs.completed_twice,
        "overlapping_runs": runs.overlapping_runs,
        "failed_for_faults": sum(failed.values()),
        "wall_s": round(wall_s, 1),
        "jobs_per_s": round(len(completed) / wall_s, 1),
        "kills": kinds["kill"],
        "freezes": kinds["freeze"],
        "redis_pauses": kinds["pause"],
        "daemon_exits": s.exits,
        "failed_reasons": dict(failed),
        "completed": len(completed),
        "other_states": dict(Counter(r.state for r in final.values() if r.state != "completed")),
        "completed_without_end_mark": len(completed - runs.ended),
        "runs_after_done": runs.runs_after_done,
        "orphan_runs": runs.orphan_runs,
        "runs": runs.runs,
        "killed_runs": runs.killed_runs,
        "reran_unreported": runs.reran_unreported,
        "reruns_by_cause": dict(runs.causes),
        "completed_twice_jobs": runs.unexplained[:20],
        "stalls_max": max(stall_counts, default=0),
        "stalled_jobs": sum(c > 0 for c in stall_counts),
        "default_max_stalls": default_cap,
        "over_default_max_stalls": sum(c > default_cap for c in stall_counts),
        "daemon_events": daemon_events(s.daemons),
    }


def daemon_events(daemons: list[Daemon]) -> dict[str, int]:
    """Events other than start and stop in the daemons' logs; a deferral by its reason."""
    seen: Counter[str] = Counter()
    for d in daemons:
        for line in (d.state / "daemon.log").read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                seen["(not a log line)"] += 1
                continue
            name = row.get("event", "")
            if name == "job_deferred":
                name = f"job_deferred:{row.get('reason')}"
            if name not in BENIGN:
                seen[name] += 1
    return dict(sorted(seen.items()))


MUST_BE_ZERO = ("lost", "completed_twice", "overlapping_runs", "failed_for_faults")


# -- the command ------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=2000, help="short jobs to run")
    p.add_argument("--batch", type=int, default=50, help="jobs per Queue.enqueue call")
    p.add_argument("--submit-s", type=float, default=30.0, help="spread the batches over this")
    p.add_argument("--sleep-s", type=float, default=0.05, help="each job's body: sleep this")
    p.add_argument("--deadline-s", type=float, default=600.0, help="then the rest are lost")
    p.add_argument("--seed", type=int, default=None, help="for the kill times and targets")
    # 32 or more: each daemon runs its jobs in two cohorts with two flights (daemon/flights.py)
    p.add_argument("--concurrency", type=int, default=8, help="slots per daemon")
    p.add_argument("--ahead", action="store_true", help="claim ahead however long runs take")
    p.add_argument("--prefix", default="soak", help="key prefix (the bench's own Redis)")
    p.add_argument("--keep", action="store_true", help="keep the work dir: logs, marks")
    p.add_argument("--json", action="store_true", help="print one JSON object per run")
    p.add_argument("--runs", type=int, default=1, help="soaks in a row, seeds --seed, +1, ...")
    args = p.parse_args(argv)
    if args.concurrency < 1 or args.runs < 1:
        p.error("--concurrency and --runs must be 1 or more")
    if args.deadline_s <= args.submit_s or args.jobs < 1:
        p.error("--deadline-s must exceed --submit-s, and --jobs be 1 or more")
    if args.jobs > Retention().keep_done:  # the oldest results would be gone when read
        p.error(f"--jobs is {args.jobs}: the queue keeps {Retention().keep_done:,} finished jobs")
    return args


def soak_once(args: argparse.Namespace, seed: int) -> Row:
    """One soak with its own redis-server, daemons and work dir; its figures."""
    args.seed = seed
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    out: Row = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "jobs": args.jobs,
        "seed": seed,
        "settings": {**DAEMON_ENV, "DISPATCH_CONCURRENCY": str(args.concurrency)},
        "claims_ahead": args.ahead,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": platform.python_version(),
    }
    try:
        with children() as kids:
            out.update(uvloop.run(run(args, kids, work)))
    finally:
        if args.keep:
            print(f"soak: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return out


SUMMARY = (*MUST_BE_ZERO, "reran_unreported", "reruns_by_cause", "wall_s", "kills", "freezes")


def report(out: Row, args: argparse.Namespace, index: int) -> None:
    if args.json:
        print(json.dumps(out), flush=True)
    elif args.runs == 1:
        for name, value in out.items():
            print(f"{name:28} {value}")
    else:
        figures = "  ".join(f"{name}={out.get(name)}" for name in SUMMARY)
        print(f"run {index + 1}/{args.runs} seed={out['seed']}  {figures}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    first = args.seed if args.seed is not None else random.randrange(2**32)
    failed = 0
    try:
        for index in range(args.runs):
            out = soak_once(args, (first + index) % 2**32)
            report(out, args, index)
            failed += any(out.get(name) for name in MUST_BE_ZERO)
    except KeyboardInterrupt:
        sys.exit(130)
    if args.runs > 1 and not args.json:
        print(f"runs with a non-zero {'/'.join(MUST_BE_ZERO)}: {failed} of {args.runs}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
