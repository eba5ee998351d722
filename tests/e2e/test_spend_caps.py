"""Spend caps under races: three daemon processes on one Redis, every job submitted at once.
Caps written in the config files hold exactly, and a run lost with its daemon is settled once."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from dispatch.client import Client, JobView
from dispatch.model import Job
from dispatch.queue.connect import redis_client
from dispatch.reasons import DOLLAR_CAP, OVER_BUDGET, SCOPE_CAP
from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, dispatch_json
from tests.support.polling import DAY_S, clear_of_midnight, eventually_sync

HOSTS = ("h1", "h2", "h3")


def fleet(redis_url: str, prefix: str, tmp_path: Path, limits: list[dict[str, Any]]) -> list[dict]:
    clear_of_midnight(180)  # each test's day window must be one day, start to end
    config = tmp_path / "config"
    config.mkdir()
    (config / "scoped-limits.json").write_text(json.dumps({"version": 1, "limits": limits}))
    return [
        cli_env(
            redis_url, prefix, tmp_path / host, DISPATCH_HOST=host, DISPATCH_CONCURRENCY="4",
            DISPATCH_CONFIG_DIR=str(config), DISPATCH_LOCK_MS="3000", DISPATCH_SWEEP_EVERY="0.5s",
        )
        for host in HOSTS
    ]  # fmt: skip


def submit_all(redis_url: str, prefix: str, jobs: list[Job]) -> None:
    async def go() -> None:
        async with Client(redis_client(redis_url, socket_timeout=10), prefix) as client:
            for job in jobs:
                await client.submit(job)

    asyncio.run(go())


def views(redis_url: str, prefix: str) -> list[JobView]:
    async def go() -> list[JobView]:
        async with Client(redis_client(redis_url, socket_timeout=10), prefix) as client:
            return await client.list(limit=1000)

    return asyncio.run(go())


def ended(redis_url: str, prefix: str, count: int) -> list[JobView] | None:
    found = [v for v in views(redis_url, prefix) if v.state in ("completed", "failed")]
    return found if len(found) == count else None


def run_fleet(redis_url: str, prefix: str, envs: list[dict], jobs: list[Job]) -> list[JobView]:
    submit_all(redis_url, prefix, jobs)  # all waiting before any daemon starts: one race
    with ExitStack() as stack:
        for env in envs:
            stack.enter_context(daemon(env))
        done = eventually_sync(lambda: ended(redis_url, prefix, len(jobs)), 120, every=0.5)
    assert done is not None
    return done


def test_a_day_run_cap_of_10_runs_exactly_10_of_40(redis_url, prefix, tmp_path) -> None:
    envs = fleet(redis_url, prefix, tmp_path, [{"scope": "*", "day": 10}])
    jobs = [Job(id=f"j{n:02d}", command=["true"]) for n in range(40)]
    done = run_fleet(redis_url, prefix, envs, jobs)
    outcomes = Counter((v.state, v.reason) for v in done)
    assert outcomes == {("completed", ""): 10, ("failed", OVER_BUDGET): 30}
    refused = next(v for v in done if v.reason == OVER_BUDGET)
    assert refused.sentence == "Over the day run cap for the whole fleet (10). Not run."
    [line] = dispatch_json(envs[0], "budget")
    assert (line["metric"], line["used"], line["inFlight"], line["cap"]) == ("runs", 10, 0, 10)
    table = dispatch(envs[0], "budget").stdout
    assert "the whole fleet" in table and "IN FLIGHT" in table


def test_a_dollar_cap_of_10_reserves_exactly_5_jobs_of_2(redis_url, prefix, tmp_path) -> None:
    envs = fleet(redis_url, prefix, tmp_path, [{"scope": "*", "dayUsd": 10}])
    jobs = [Job(id=f"j{n:02d}", command=["sleep", "0.3"], max_cost_usd=2) for n in range(20)]
    done = run_fleet(redis_url, prefix, envs, jobs)
    outcomes = Counter((v.state, v.reason) for v in done)
    assert outcomes == {("completed", ""): 5, ("failed", DOLLAR_CAP): 15}
    [line] = dispatch_json(envs[0], "budget")
    assert (line["used"], line["inFlight"], line["cap"]) == (10.0, 0.0, 10.0)


def test_a_scoped_row_and_the_fleet_row_each_hold(redis_url, prefix, tmp_path) -> None:
    limits = [{"scope": "*", "day": 6}, {"scope": "acme/web", "day": 3}]
    envs = fleet(redis_url, prefix, tmp_path, limits)
    web = [Job(id=f"web{n}", kind="forge", repo="acme/web", command=["true"]) for n in range(8)]
    api = [Job(id=f"api{n}", kind="forge", repo="acme/api", command=["true"]) for n in range(8)]
    done = run_fleet(redis_url, prefix, envs, [*web, *api])
    completed = [v.id for v in done if v.state == "completed"]
    assert len(completed) == 6
    assert sum(i.startswith("web") for i in completed) <= 3
    assert {v.reason for v in done if v.state == "failed"} <= {SCOPE_CAP, OVER_BUDGET}
    lines = {(x["ledger"], x["metric"]): x for x in dispatch_json(envs[0], "budget")}
    assert lines[("the whole fleet", "runs")]["used"] == 6
    assert lines[("acme/web", "runs")]["used"] <= 3


def test_a_run_lost_with_its_daemon_is_settled_once(redis_url, prefix, tmp_path) -> None:
    limits = [{"scope": "*", "day": 5, "dayUsd": 100}]
    first, second, _ = fleet(redis_url, prefix, tmp_path, limits)
    started, go = tmp_path / "started", tmp_path / "go"
    script = f"echo run >> {started}; while [ ! -e {go} ]; do sleep 0.05; done"
    submit_all(redis_url, prefix, [Job(id="lost", command=["sh", "-c", script], max_cost_usd=2)])
    with daemon(first) as proc:
        eventually_sync(started.exists, 20)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    go.touch()
    with daemon(second):  # another host: its sweep puts the job back and settles the lost run
        eventually_sync(lambda: ended(redis_url, prefix, 1), 60, every=0.5)
        eventually_sync(lambda: "budget_lost_settled" in daemon_log(second), 20)
    assert started.read_text() == "run\nrun\n"
    lines = {x["metric"]: x for x in dispatch_json(second, "budget")}
    # the lost run at its reserved $2, the rerun at $2 (no report): once each, nothing held
    assert (lines["runs"]["used"], lines["runs"]["inFlight"]) == (2, 0)
    assert (lines["usd"]["used"], lines["usd"]["inFlight"]) == (4.0, 0.0)
    assert daemon_log(second).count("budget_lost_settled") == 1


def test_submit_takes_a_dollar_cap_and_urgent_and_refuses_a_bad_cap(
    redis_url, prefix, tmp_path
) -> None:
    env = cli_env(redis_url, prefix, tmp_path / "s")
    for bad in ("-1", "0", "nan", "inf", "2e6"):
        done = dispatch(env, "submit", "--max-cost-usd", bad, "--", "true")
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "maxCostUsd must be above 0" in done.stderr
    done = dispatch(env, "submit", "--id", "u1", "--max-cost-usd", "2.5", "--urgent", "--", "true")
    assert done.returncode == 0, done.stderr
    raw = asyncio.run(_document(redis_url, prefix, "u1"))
    assert (raw["maxCostUsd"], raw["urgent"]) == (2.5, True)


async def _document(redis_url: str, prefix: str, job_id: str) -> dict[str, Any]:
    async with Client(redis_client(redis_url, socket_timeout=10), prefix) as client:
        raw = await client.redis.hget(client.queue("jobs").keys.data, job_id)
    assert raw is not None
    return json.loads(raw)


def test_a_test_near_midnight_waits_until_the_day_has_turned() -> None:
    instants = iter([DAY_S * 3 - 20, DAY_S * 3 - 10, DAY_S * 3 + 1])
    clear_of_midnight(60, now=lambda: next(instants))
    assert next(instants, None) is None  # asked until the day turned, and no longer
    clear_of_midnight(60, now=lambda: DAY_S * 3 + 61)  # far enough off: at once
