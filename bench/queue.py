"""Queue throughput and delayed-job lateness of dispatch's daemon, with no-op jobs.

    python -m bench.queue [--jobs 20000] [--concurrency 50] [--processes 1] [--json]

Starts its own redis-server on a free port (no persistence) unless DISPATCH_REDIS_URL names
one, and uses a fresh key prefix per run. The daemons are dispatch's own `Worker`, each in a
process of its own (host names bench-1, bench-2, ...) with default timings, a processor
without gates (with every gate, on an empty config dir, under `--gates`; bench.config_scale
gives it a full one), and an in-process runner that returns at once.

Phases, in order:
  enqueue   N jobs into a paused queue, `--batch` per `Queue.enqueue` call; no daemon runs.
  process   P daemons start, go idle, then the queue is resumed: from the server instant of
            the resume to the last finish (server clock), enqueue -> claim -> complete.
            The daemons' RSS is read once a tenth of the jobs is done and at the end
            (`--jobs 200000`: the memory target compares RSS at 20,000 and at 200,000).
  spread    1,000 delayed jobs due one every 5 ms over 5 s;
  burst     1,000 delayed jobs due at one instant. Lateness = when the runner is called
            (time.time()) minus the job's due instant (from Redis TIME: one machine, one clock).
  idle      one daemon on an empty queue, its commands per second over `--idle-s` seconds.

`BENCH_PROFILE=PATH` runs each daemon under cProfile and writes its stats to PATH.<state dir>
(`<prefix>-<n>`; the idle phase's daemon, under a prefix of its own, writes a file of its own).

Redis commands come from INFO commandstats deltas, so a command a script runs counts like one
a client sends; `script_calls_per_job` counts the EVALSHA round trips alone. The bench's own
polling is subtracted. `steal_pct` and `other_cpu_pct` (of one core, during the process phase)
say how much a shared host took away from the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import platform
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop
from redis.asyncio import Redis

from bench.support.cpu import machine_cpu_s, process_cpu_s
from bench.support.output import print_figures
from bench.support.redis import Stats, redis_server, redis_version, server_ms, stats
from bench.support.stats import percentile
from dispatch.clock import SystemClock
from dispatch.config.schemas import ConfigSnapshot
from dispatch.config.settings import Settings
from dispatch.config.watcher import ConfigFiles
from dispatch.daemon.assembly import gated_processor
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.daemon.worker import Worker
from dispatch.gates.base import active
from dispatch.log import log
from dispatch.model import Job, encode_job, new_id
from dispatch.queue import keys
from dispatch.queue.connect import redis_client
from dispatch.queue.transitions import NewJob, Queue
from dispatch.runners.base import IsLive, RunContext, Runner, RunResult

Row = dict[str, Any]
LATE_JOBS = 1_000
SPREAD_MS = 5_000
LEAD_MS = 1_000  # the first due instant, after the server time read before enqueueing
POLL_S = 0.02
POLL_CMDS = 3  # LLEN wait, ZCARD active, ZCARD delayed
BENIGN = {"worker_started", "worker_draining", "worker_stopped"}
CONFIG_ROWS = ("limits", "windows", "triggers", "projects", "endpoints")


# -- the daemon side ------------------------------------------------------------------------


class NoopRunner(Runner):
    """Returns at once; notes each job it ran (in a file, so that a long run's memory is the
    daemon's own) and, for a delayed one, how late it was called."""

    def __init__(self, ids_path: Path) -> None:
        self.ids_path = ids_path
        self.ids = open(ids_path, "a")  # noqa: SIM115 - closed by `ran`
        self.lateness_ms: dict[str, list[float]] = {}

    async def run(self, ctx: RunContext) -> RunResult:
        now = time.time()
        env = ctx.env()
        if "BENCH_DUE_MS" in env:
            late = now * 1000 - int(env["BENCH_DUE_MS"])
            self.lateness_ms.setdefault(env["BENCH_PHASE"], []).append(late)
        self.ids.write(ctx.job.id + "\n")
        now_ms = int(now * 1000)
        return RunResult(started=True, exit_code=0, started_ms=now_ms, ended_ms=now_ms)

    async def reap(self, host: str, is_live: IsLive) -> bool:
        return True  # its runs leave nothing behind

    async def settle(self) -> None:
        pass

    def ran(self) -> list[str]:
        self.ids.close()
        return self.ids_path.read_text().split()


@dataclass(frozen=True, slots=True)
class DaemonSpec:
    url: str
    prefix: str
    host: str
    concurrency: int
    state_dir: Path
    gates: bool = False
    config_dir: Path | None = None  # the gated daemon's; None: an empty one in its state dir
    without: tuple[str, ...] = ()  # parts of the gated daemon taken off (PARTS)


async def serve(spec: DaemonSpec, stop_flag: Any) -> Row:
    """One daemon as `dispatch worker` assembles it, with the no-op runner, until told to stop."""
    settings = Settings(
        redis_url=spec.url,
        embedded=False,
        prefix=spec.prefix,
        host=spec.host,
        concurrency=spec.concurrency,
        state_dir=spec.state_dir,
    )
    redis, blocking = redis_client(spec.url, 15), redis_client(spec.url, 30)
    runner = NoopRunner(spec.state_dir / "ran.txt")
    seen: Row = {}
    async with contextlib.AsyncExitStack() as stack:
        if spec.gates:  # every gate, as `dispatch worker` runs them, on its config dir
            config = ConfigFiles(spec.config_dir or spec.state_dir / "config", SystemClock())
            processor = await stack.enter_async_context(
                gated_processor(settings, redis, runner, config)
            )
            stack.callback(lambda: seen.update(config_seen(config.current(), processor)))
            take_off(processor, spec.without)
        else:
            output = spec.state_dir / "output"
            processor = Processor(ProcessorSettings(host=spec.host, output_dir=output), runner)
        worker = Worker(settings, redis, processor, blocking=blocking)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        await asyncio.get_running_loop().run_in_executor(None, stop_flag.wait)
        stop.set()
        await task
    await redis.aclose()
    await blocking.aclose()
    ran = {"host": spec.host, "ids": runner.ran(), "lateness_ms": runner.lateness_ms}
    return {**ran, **seen}


def _no_gates(p: Processor) -> None:
    p.gates = []


def _no_usage(p: Processor) -> None:
    p._usage = None  # built from its settings at construction: dropped where it is kept


def _no_tails(p: Processor) -> None:
    p.tails = None


def _no_log(p: Processor) -> None:
    p.local_log = None  # the worker's finish writes the record instead, as in the plain daemon


# what the gated processor has that the plain one lacks, and how to take each off
PARTS: dict[str, Callable[[Processor], None]] = {
    "gates": _no_gates,
    "usage": _no_usage,
    "tails": _no_tails,
    "log": _no_log,
}


def take_off(processor: Processor, parts: tuple[str, ...]) -> None:
    """The gated processor less `parts` (PARTS): its gates, its usage report dirs, its output
    tails in Redis, or its write of a run's record to the local run log as the run ends; or
    less one gate, `gate:NAME` (gate_names)."""
    for part in parts:
        name = part.removeprefix("gate:")
        if name != part and name in gate_names():
            processor.gates = [gate for gate in processor.gates if gate.name != name]
        elif part in PARTS:
            PARTS[part](processor)
        else:
            raise ValueError(f"no part {part!r} (one of {', '.join(PARTS)}, or gate:NAME)")


def parts_off(
    p: argparse.ArgumentParser, text: str, known: Collection[str], said: str
) -> list[str]:
    """`--without`'s comma-separated parts, each one of `known` (`said` names them); a part
    that is not is refused in one line."""
    parts = [part for part in text.split(",") if part]
    if unknown := [part for part in parts if part not in known]:
        p.error(f"--without {','.join(unknown)}: not a part (one of {said})")
    return parts


def gate_names() -> set[str]:
    """The name of every gate the gated pipeline is made of."""
    from dispatch.gates import pipeline

    return {
        gate.name
        for symbol, gate in vars(pipeline).items()
        if symbol.endswith("Gate") and isinstance(getattr(gate, "name", None), str)
    }


def config_seen(config: ConfigSnapshot, processor: Processor) -> Row:
    """What the gated daemon's gates read at the end: the rows of each file, the files it
    could not load, and the gates that config left active."""
    rows = {name: len(getattr(config, name)) for name in CONFIG_ROWS}
    gates = [g.name for g in active(processor.gates, config)]
    return {"config_rows": rows, "config_errors": dict(config.errors), "active_gates": gates}


def daemon_main(spec: DaemonSpec, stop_flag: Any, out: Any) -> None:
    spec.state_dir.mkdir(parents=True, exist_ok=True)
    with open(spec.state_dir / "daemon.log", "w") as stream:
        log.stream, log.human = stream, False
        profile = os.environ.get("BENCH_PROFILE")
        if not profile:
            row = uvloop.run(serve(spec, stop_flag))
        else:  # cProfile's figures are inflated 3-4x, but say where a daemon's calls go
            import cProfile

            with cProfile.Profile() as prof:
                row = uvloop.run(serve(spec, stop_flag))
            prof.dump_stats(f"{profile}.{spec.state_dir.name}")
    out.put(row)


class Fleet:
    """P daemon processes on one prefix: started, awaited, stopped, their tallies gathered."""

    def __init__(
        self,
        url: str,
        prefix: str,
        processes: int,
        concurrency: int,
        tmp: Path,
        gates: bool,
        config_dir: Path | None = None,
        target: Callable[[DaemonSpec, Any, Any], None] = daemon_main,
        without: tuple[str, ...] = (),
    ):
        ctx = mp.get_context("spawn")
        self.stop_flag, self.out = ctx.Event(), ctx.Queue()
        self.specs = [
            DaemonSpec(
                url,
                prefix,
                f"bench-{i + 1}",
                concurrency,
                tmp / f"{prefix}-{i + 1}",
                gates,
                config_dir,
                without,
            )
            for i in range(processes)
        ]
        self.procs = [
            ctx.Process(target=target, args=(s, self.stop_flag, self.out), daemon=True)
            for s in self.specs
        ]

    async def start(self, redis: Redis, settle_s: float = 0.5, within_s: float = 30.0) -> None:
        for p in self.procs:
            p.start()
        deadline = time.monotonic() + within_s
        alive = [keys.host_alive(s.host, s.prefix) for s in self.specs]
        while await redis.exists(*alive) < len(alive):
            if time.monotonic() > deadline or not all(p.is_alive() for p in self.procs):
                raise SystemExit(f"the daemons did not start within {within_s:.0f} s")
            await asyncio.sleep(0.05)
        await asyncio.sleep(settle_s)  # let the first claim and stall sweep pass

    def cpu_s(self) -> float:
        """User + system CPU seconds the daemon processes have used so far."""
        return process_cpu_s(p.pid for p in self.procs if p.pid is not None)

    def rss_mib(self) -> float:
        """Resident memory of the daemon processes now."""
        total = 0
        for p in self.procs:
            with open(f"/proc/{p.pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return total / 1024

    def stop(self) -> list[Row]:
        self.stop_flag.set()
        rows = [self.out.get(timeout=60) for _ in self.procs]
        for p in self.procs:
            p.join(timeout=10)
        return rows

    def warnings(self) -> Counter[str]:
        """Events other than start and stop in the daemons' logs: lock losses, Redis errors."""
        seen: Counter[str] = Counter()
        for s in self.specs:
            for line in (s.state_dir / "daemon.log").read_text().splitlines():
                name = json.loads(line).get("event", "")
                if name not in BENIGN:
                    seen[name] += 1
        return seen


# -- measuring --------------------------------------------------------------------------------


async def enqueue(queue: Queue, jobs: list[NewJob], batch: int) -> float:
    """Seconds spent enqueueing `jobs` in calls of `batch`; every job must be created."""
    started = time.perf_counter()
    created = 0
    for i in range(0, len(jobs), batch):
        created += sum(e.created for e in await queue.enqueue(jobs[i : i + batch]))
    elapsed = time.perf_counter() - started
    if created != len(jobs):
        raise SystemExit(f"enqueue created {created} of {len(jobs)} jobs")
    return elapsed


async def drained(
    queue: Queue, timeout_s: float = 90.0, on_poll: Callable[[int], None] | None = None
) -> int:
    """Poll until nothing waits, runs or is delayed; return how many polls it took. `on_poll`
    is told how many jobs are still in the queue at each poll."""
    k, polls = queue.keys, 0
    deadline = time.monotonic() + timeout_s
    while True:
        polls += 1
        async with queue.redis.pipeline(transaction=False) as pipe:
            pipe.llen(k.wait)
            pipe.zcard(k.active)
            pipe.zcard(k.delayed)
            counts = await pipe.execute()
        if on_poll is not None:
            on_poll(sum(counts))
        if not any(counts):
            return polls
        if time.monotonic() > deadline:
            raise SystemExit(f"queue not drained within {timeout_s} s: {counts}")
        await asyncio.sleep(POLL_S)


def plain_jobs(n: int) -> list[NewJob]:
    jobs = []
    for _ in range(n):
        job_id = new_id()
        jobs.append(NewJob(job_id, encode_job(Job(id=job_id, command=["true"]))))
    return jobs


def timed_jobs(phase: str, due_ms: list[int]) -> list[NewJob]:
    jobs = []
    for due in due_ms:
        job_id = new_id()
        env = {"BENCH_PHASE": phase, "BENCH_DUE_MS": str(due)}
        doc = encode_job(Job(id=job_id, command=["true"], env=env))
        jobs.append(NewJob(job_id, doc, due_ms=due))
    return jobs


# -- phases ---------------------------------------------------------------------------------


@dataclass
class Run:
    args: argparse.Namespace
    url: str
    redis: Redis
    tmp: Path
    prefix: str = field(default_factory=lambda: f"bench{uuid.uuid4().hex[:10]}")
    out: Row = field(default_factory=dict)

    @property
    def queue(self) -> Queue:
        return Queue(self.redis, "jobs", self.prefix)

    def fleet(self, processes: int, prefix: str | None = None) -> Fleet:
        concurrency = self.args.concurrency
        gates = self.args.gates
        return Fleet(self.url, prefix or self.prefix, processes, concurrency, self.tmp, gates)


async def enqueue_phase(run: Run) -> Stats:
    n = run.args.jobs
    jobs = plain_jobs(n)
    await run.queue.pause()  # jobs still enqueue while paused; no daemon runs yet anyway
    before = await stats(run.redis)
    elapsed = await enqueue(run.queue, jobs, run.args.batch)
    used = await stats(run.redis) - before
    run.out["enqueue_per_s"] = round(n / elapsed)
    run.out["enqueue_cmds_per_job"] = round(used.total / n, 3)
    return used


async def process_phase(run: Run, fleet: Fleet) -> Stats:
    n, queue = run.args.jobs, run.queue
    before, cpu_before, machine_before = await stats(run.redis), fleet.cpu_s(), machine_cpu_s()
    resumed_ms = await server_ms(run.redis)
    rss: list[float] = []

    def sample(left: int) -> None:  # the daemons' RSS once a tenth of the jobs is done
        if not rss and left <= n - n // 10:
            rss.append(fleet.rss_mib())

    await queue.resume()  # DEL paused, ZADD marker: wakes a daemon
    polls = await drained(queue, timeout_s=max(90.0, n / 500), on_poll=sample)
    rss.append(fleet.rss_mib())
    used, cpu = await stats(run.redis) - before, fleet.cpu_s() - cpu_before
    busy, steal = (a - b for a, b in zip(machine_cpu_s(), machine_before, strict=True))
    newest = await run.redis.zrange(queue.keys.done, -1, -1, withscores=True)
    elapsed_s = (int(newest[0][1]) - resumed_ms) / 1000
    own = {"time": 1, "del": 1, "zadd": 1, "llen": polls, "zcard": 2 * polls}
    used = used - Stats(own, 0.0)
    run.out["processed_per_s"] = round(n / elapsed_s)
    run.out["process_cmds_per_job"] = round(used.total / n, 3)
    run.out["script_calls_per_job"] = round(used.scripts / n, 3)
    run.out["daemon_cpu_us_per_job"] = round(cpu / n * 1e6, 1)
    run.out["redis_cpu_us_per_job"] = round(used.cpu_s / n * 1e6, 1)
    # CPU the daemons and Redis did not use: the bench's polling, and anything else running
    run.out["other_cpu_pct"] = round((busy - cpu - used.cpu_s) / elapsed_s * 100, 1)
    run.out["steal_pct"] = round(steal / elapsed_s * 100, 1)
    run.out["daemon_rss_mib_at_tenth"] = round(rss[0], 1)
    run.out["daemon_rss_mib_at_end"] = round(rss[-1], 1)
    run.out["daemon_rss_growth_pct"] = round((rss[-1] / rss[0] - 1) * 100, 1)
    return used


async def lateness_phase(run: Run, phase: str) -> None:
    """Enqueue 1,000 delayed jobs due from one server instant on; wait until all have run."""
    start = await server_ms(run.redis) + LEAD_MS
    if phase == "spread":
        due = [start + i * SPREAD_MS // LATE_JOBS for i in range(LATE_JOBS)]
    else:
        due = [start] * LATE_JOBS
    await enqueue(run.queue, timed_jobs(phase, due), run.args.batch)
    await drained(run.queue)


async def idle_phase(run: Run) -> None:
    """One daemon, nothing to do: its commands per second after it has settled."""
    fleet = run.fleet(1, prefix=f"{run.prefix}idle")
    await fleet.start(run.redis, settle_s=1.0)
    before = await stats(run.redis)
    await asyncio.sleep(run.args.idle_s)
    used = await stats(run.redis) - before
    await asyncio.get_running_loop().run_in_executor(None, fleet.stop)
    run.out["idle_cmds_per_s"] = round(used.total / run.args.idle_s, 2)
    run.out["idle_script_calls_per_s"] = round(used.scripts / run.args.idle_s, 2)
    run.out["idle_by_command"] = dict(sorted(used.calls.items()))


def summarize(run: Run, rows: list[Row], enqueued: Stats, processed: Stats) -> None:
    n, out = run.args.jobs, run.out
    out["redis_cmds_per_job"] = round((enqueued.total + processed.total) / n, 3)
    per_job = processed.calls
    out["process_by_command"] = {
        name: round(calls / n, 3) for name, calls in sorted(per_job.items(), key=lambda kv: -kv[1])
    }
    for phase in ("spread", "burst"):
        late = [x for r in rows for x in r["lateness_ms"].get(phase, [])]
        out[f"lateness_{phase}_p50_ms"] = round(percentile(late, 0.50), 1)
        out[f"lateness_{phase}_p99_ms"] = round(percentile(late, 0.99), 1)
        out[f"lateness_{phase}_max_ms"] = round(max(late, default=float("nan")), 1)
        out[f"lateness_{phase}_jobs"] = len(late)
    ran = [i for r in rows for i in r["ids"]]
    out["runs"] = len(ran)
    out["duplicate_runs"] = len(ran) - len(set(ran))
    out["runs_by_host"] = {r["host"]: len(r["ids"]) for r in rows}


async def measure(args: argparse.Namespace, url: str, tmp: Path) -> Row:
    redis = Redis.from_url(url)
    run = Run(args, url, redis, tmp)
    try:
        enqueued = await enqueue_phase(run)
        fleet = run.fleet(args.processes)
        await fleet.start(redis)
        processed = await process_phase(run, fleet)
        for phase in () if args.quick else ("spread", "burst"):
            await lateness_phase(run, phase)
        rows = await asyncio.get_running_loop().run_in_executor(None, fleet.stop)
        run.out["daemon_warnings"] = dict(fleet.warnings())
        summarize(run, rows, enqueued, processed)
        if not args.quick:
            await idle_phase(run)
    finally:
        await redis.aclose()
    return run.out


# -- the command ----------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.queue", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=20_000, help="no-op jobs to process")
    p.add_argument("--concurrency", type=int, default=50, help="jobs at once per daemon")
    p.add_argument("--processes", type=int, default=1, help="daemon processes, one queue")
    p.add_argument("--batch", type=int, default=500, help="jobs per Queue.enqueue call")
    p.add_argument("--idle-s", type=float, default=5.0, help="idle-daemon window")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--gates", action="store_true", help="run every admission gate per job")
    p.add_argument("--quick", action="store_true", help="the process phase alone")
    return p.parse_args(argv)


async def main_async(args: argparse.Namespace) -> Row:
    with redis_server() as url, tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp:
        started = time.monotonic()
        out: Row = {
            "config": f"c{args.concurrency} p{args.processes}",
            "jobs": args.jobs,
            "concurrency": args.concurrency,
            "processes": args.processes,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "python": platform.python_version(),
            "redis": await redis_version(url),
        }
        out.update(await measure(args, url, Path(tmp)))
        out["bench_s"] = round(time.monotonic() - started, 1)
        return out


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    print_figures(uvloop.run(main_async(args)), args.json)


if __name__ == "__main__":
    main()
