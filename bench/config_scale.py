"""Gate cost as the configuration grows: the gated drain on an empty config dir and on a large one.

    python -m bench.config_scale [--jobs 20000] [--concurrency 50] [--reps 3] [--json]

The drain is bench.queue's process phase under `--gates` (one daemon, every gate, the no-op
runner), run once per config in each rep, the order alternating rep by rep, each on a fresh key
prefix of one redis-server. The large config dir holds 1,000 scoped-limit rows, 1,000 pause
windows, 500 triggers, 200 projects and 100 model endpoints, valid as the loader reads them, and
none of them matches the bench's jobs: every job is still admitted, but every gate that reads a
file looks at it. So that each of those gates has something to match, a job here is a forge
job on `bench/noop` with model `bench-model` (bench.queue's are plain jobs): the scope gate looks
up the repo's row, the project gate the repo's project, the endpoint gate the model's endpoints,
the pause gate every window's scope and the spend gate every row's. The windows whose scope
is "*" do match, but none is active (fixed ones in the past or a year ahead, recurring ones
hours away from now). The triggers are not minted: bench.queue's daemon has no minter.

The daemon reports what its gates read (rows per file, files it could not load, gates the config
left active); the bench stops if the large config is not what it wrote. Figures per rep: jobs/s,
Redis commands and daemon CPU per job of each config, the CPU the rest of the machine took
meanwhile (bench.queue's `other_cpu_pct`: a busy host shows there), and the slowdown, empty
jobs/s over large jobs/s; the target is a median slowdown of at most 1.3x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvloop
from redis.asyncio import Redis

from bench.queue import CONFIG_ROWS, Fleet, Run, enqueue, process_phase
from bench.support.redis import redis_server, redis_version
from dispatch.config.watcher import load_once
from dispatch.model import Job, encode_job, new_id
from dispatch.queue.transitions import NewJob

Row = dict[str, Any]
SIZES = {"limits": 1_000, "windows": 1_000, "triggers": 500, "projects": 200, "endpoints": 100}
TARGET = 1.3
REPO, MODEL = "bench/noop", "bench-model"
CONFIGS = ("empty", "large")
ZONES = ("UTC", "Europe/Amsterdam", "America/New_York", "Asia/Tokyo")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# gates that must be left active by the large config: they have rows to read
READERS = {"project", "pause", "scope", "endpoint", "spend", "trigger-overlap"}


# -- the large config ----------------------------------------------------------------------


def limit_rows(n: int) -> list[Row]:
    """Repo rows with concurrency and run caps, folder, project and model rows with caps."""
    rows: list[Row] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            rows.append({"scope": f"team{i}/svc{i}", "concurrent": 2, "day": 50, "week": 200})
        elif kind == 1:
            rows.append({"scope": f"/srv/work/site{i}", "month": 60, "monthUsd": 100.0})
        elif kind == 2:
            rows.append({"scope": f"project:proj{i}", "dayUsd": 20.0, "softHoldPct": 80})
        else:
            rows.append({"scope": f"model:model-{i}", "dailyTokens": 2_000_000})
    return rows


def window_rows(n: int, now: datetime) -> list[Row]:
    """Recurring windows on repos, folders and projects; on "*" only windows not active now:
    recurring ones starting 3 h and more from now (UTC), fixed ones past or a year ahead."""
    rows: list[Row] = []
    for i in range(n):
        kind = i % 10
        if kind == 0:  # everything, but not now
            later = now + timedelta(hours=3 + i % 5)
            until = later + timedelta(minutes=30)
            rows.append({"scope": "*", "from": f"{later:%H:%M}", "to": f"{until:%H:%M}"})
        elif kind == 1:
            start = now + timedelta(days=365 + i) if i % 20 == 1 else now - timedelta(days=i + 2)
            end = start + timedelta(hours=6)
            rows.append({"scope": "*", "start": start.isoformat(), "end": end.isoformat()})
        elif kind < 6:
            days = [DAYS[(i + d) % 7] for d in range(5)]
            rows.append(
                {"scope": f"team{i}/svc{i}", "from": "22:00", "to": "06:00",
                 "tz": ZONES[i % len(ZONES)], "days": days}
            )  # fmt: skip
        elif kind < 8:
            rows.append({"scope": f"/srv/work/site{i}", "from": "12:00", "to": "13:00"})
        else:
            rows.append({"scope": f"proj{i}", "from": "01:00", "to": "05:00", "days": ["sat"]})
    return rows


def trigger_rows(n: int) -> list[Row]:
    rows: list[Row] = []
    for i in range(n):
        job = {"kind": "forge", "repo": f"team{i}/svc{i}", "command": ["make", "nightly"]}
        rows.append(
            {"id": f"nightly-{i}", "cron": f"{i % 60} {i % 24} * * *", "tz": ZONES[i % len(ZONES)],
             "job": job, "overlap": "skip" if i % 5 else "allow", "jitter": "2m"}
        )  # fmt: skip
    return rows


def project_rows(n: int) -> list[Row]:
    return [
        {"id": f"proj{i}", "repos": [f"team{i}/svc{i}", f"team{i}/lib{i}"],
         "folders": [f"/srv/work/proj{i}"], "memory": "8g", "cpus": 4, "hostShare": 0.5,
         "concurrent": 3}
        for i in range(n)
    ]  # fmt: skip


def endpoint_rows(n: int) -> list[Row]:
    return [
        {"id": f"ep-{i:03}", "host": f"http://10.0.{i // 250}.{i % 250 + 1}:8000/v1", "slots": 4,
         "models": [f"model-{i}", f"model-{i}-mini"]}
        for i in range(n)
    ]  # fmt: skip


def write_large(config_dir: Path, sizes: dict[str, int] = SIZES) -> None:
    """The large config's files in `config_dir`, `sizes` rows of each kind."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    files = {
        "scoped-limits.json": {"limits": limit_rows(sizes["limits"])},
        "pause-windows.json": {"windows": window_rows(sizes["windows"], now)},
        "triggers.json": {"triggers": trigger_rows(sizes["triggers"])},
        "projects.json": {"projects": project_rows(sizes["projects"])},
        "model-endpoints.json": {"endpoints": endpoint_rows(sizes["endpoints"])},
    }
    config_dir.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        (config_dir / name).write_text(json.dumps({"version": 1, **body}, indent=1))


def loaded_rows(config_dir: Path) -> dict[str, int]:
    """The rows per file the loader takes from `config_dir`; SystemExit for a file it refuses."""
    snapshot = load_once(config_dir)
    if snapshot.errors or snapshot.newer:
        raise SystemExit(f"the config loader refused {config_dir}: {snapshot.errors}")
    return {name: len(getattr(snapshot, name)) for name in CONFIG_ROWS}


# -- one drain -------------------------------------------------------------------------------


def bench_jobs(n: int) -> list[NewJob]:
    jobs = []
    for _ in range(n):
        job_id = new_id()
        job = Job(id=job_id, kind="forge", repo=REPO, model=MODEL, command=["true"])
        jobs.append(NewJob(job_id, encode_job(job)))
    return jobs


async def drain(args: argparse.Namespace, url: str, tmp: Path, config_dir: Path) -> Row:
    """bench.queue's gated process phase on a fresh prefix, the daemon reading `config_dir`."""
    redis = Redis.from_url(url)
    run = Run(args, url, redis, tmp, prefix=f"cs{uuid.uuid4().hex[:10]}")
    try:
        await run.queue.pause()
        await enqueue(run.queue, bench_jobs(args.jobs), args.batch)
        fleet = Fleet(url, run.prefix, 1, args.concurrency, tmp, True, config_dir)
        await fleet.start(redis)
        await process_phase(run, fleet)
        rows = await asyncio.get_running_loop().run_in_executor(None, fleet.stop)
    finally:
        await redis.aclose()
    out = run.out
    seen = rows[0]
    return {
        "jobs_per_s": out["processed_per_s"],
        "cmds_per_job": out["process_cmds_per_job"],
        "daemon_cpu_us_per_job": out["daemon_cpu_us_per_job"],
        "other_cpu_pct": out["other_cpu_pct"],
        "steal_pct": out["steal_pct"],
        "runs": len(seen["ids"]),
        "config_rows": seen["config_rows"],
        "config_errors": seen["config_errors"],
        "active_gates": seen["active_gates"],
        "daemon_warnings": dict(fleet.warnings()),
    }


def check_loaded(name: str, row: Row, want: dict[str, int], jobs: int) -> None:
    """The daemon read what the bench wrote, ran every job once, and its gates saw the rows."""
    problems = []
    if row["config_rows"] != want or row["config_errors"]:
        problems.append(f"config read {row['config_rows']}, errors {row['config_errors']}")
    if name == "large" and not set(row["active_gates"]) >= READERS:
        problems.append(f"gates left active: {row['active_gates']}")
    if row["runs"] != jobs:
        problems.append(f"ran {row['runs']} of {jobs} jobs")
    if problems:
        raise SystemExit(f"{name} config: " + "; ".join(problems))


# -- the command ----------------------------------------------------------------------------


async def measure(args: argparse.Namespace, url: str, tmp: Path) -> Row:
    dirs = {"empty": tmp / "config-empty", "large": tmp / "config-large"}
    dirs["empty"].mkdir()
    write_large(dirs["large"])
    want = {name: loaded_rows(path) for name, path in dirs.items()}
    if want["large"] != SIZES:
        raise SystemExit(f"the large config loads {want['large']}, not {SIZES}")
    reps: list[Row] = []
    for rep in range(args.reps):
        order = CONFIGS if rep % 2 == 0 else CONFIGS[::-1]
        row: Row = {"order": list(order), "load_before": os.getloadavg()[0]}
        for name in order:
            row[name] = await drain(args, url, tmp, dirs[name])
            check_loaded(name, row[name], want[name], args.jobs)
        row["slowdown"] = round(row["empty"]["jobs_per_s"] / row["large"]["jobs_per_s"], 3)
        reps.append(row)
    return summarize(reps)


def summarize(reps: list[Row]) -> Row:
    slowdown = round(statistics.median(r["slowdown"] for r in reps), 3)
    out: Row = {"median_slowdown": slowdown, "target": TARGET, "met": slowdown <= TARGET}
    for name in CONFIGS:
        out[f"{name}_jobs_per_s_median"] = round(
            statistics.median(r[name]["jobs_per_s"] for r in reps)
        )
        out[f"{name}_cmds_per_job_median"] = statistics.median(
            r[name]["cmds_per_job"] for r in reps
        )
    out["reps"] = reps
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.config_scale", description=__doc__.split("\n")[0]
    )
    p.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per drain")
    p.add_argument("--concurrency", type=int, default=50, help="jobs at once in the daemon")
    p.add_argument("--reps", type=int, default=3, help="drains of each config, alternated")
    p.add_argument("--batch", type=int, default=500, help="jobs per Queue.enqueue call")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    args.gates = True  # what bench.queue's Run reads
    return args


async def main_async(args: argparse.Namespace) -> Row:
    with redis_server() as url, tempfile.TemporaryDirectory(prefix="bench-config-") as tmp:
        started = time.monotonic()
        out: Row = {
            "jobs": args.jobs,
            "concurrency": args.concurrency,
            "sizes": SIZES,
            "cpus": os.cpu_count(),
            "redis": await redis_version(url),
            "load_at_start": os.getloadavg()[0],
        }
        out.update(await measure(args, url, Path(tmp)))
        out["bench_s"] = round(time.monotonic() - started, 1)
        return out


def render(out: Row) -> list[str]:
    lines = [
        f"jobs {out['jobs']:,} per drain, concurrency {out['concurrency']}, large config"
        f" {', '.join(f'{v:,} {k}' for k, v in out['sizes'].items())}"
        f" (load average {out['load_at_start']:.2f} at start)",
        f"{'rep':>4} {'order':12} {'empty jobs/s':>13} {'large jobs/s':>13} {'slowdown':>9}"
        f" {'cmds/job empty':>15} {'large':>6} {'cpu us/job empty':>17} {'large':>6}"
        f" {'other cpu % empty':>18} {'large':>6}",
    ]
    for i, r in enumerate(out["reps"]):
        e, g = r["empty"], r["large"]
        lines.append(
            f"{i + 1:>4} {'/'.join(r['order']):12} {e['jobs_per_s']:>13,} {g['jobs_per_s']:>13,}"
            f" {r['slowdown']:>8.3f}x {e['cmds_per_job']:>15} {g['cmds_per_job']:>6}"
            f" {e['daemon_cpu_us_per_job']:>17} {g['daemon_cpu_us_per_job']:>6}"
            f" {e['other_cpu_pct']:>18} {g['other_cpu_pct']:>6}"
        )
    verdict = "met" if out["met"] else "NOT met"
    lines.append(
        f"median slowdown large/empty {out['median_slowdown']:.3f}x (target <= {TARGET}x: "
        f"{verdict}); bench {out['bench_s']} s"
    )
    return lines


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    out = uvloop.run(main_async(args))
    print(json.dumps(out) if args.json else "\n".join(render(out)))


if __name__ == "__main__":
    main()
