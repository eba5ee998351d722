"""Cron triggers with real daemon processes and the CLI.

Three daemons on one Redis, one shared triggers.json with a 6-field trigger every 2 seconds:
each occurrence is one job, run once, and none is missed. Then `dispatch trigger run`, `pause`
and `resume`, `dispatch triggers` and `dispatch why` as an operator uses them.
"""

from __future__ import annotations

import json
from collections import Counter
from contextlib import ExitStack
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync

HOSTS = ("t1", "t2", "t3")


def write_triggers(config: Path, *triggers: dict) -> None:
    config.mkdir(parents=True, exist_ok=True)
    (config / "triggers.json").write_text(json.dumps({"version": 1, "triggers": list(triggers)}))


def envs(redis_url: str, prefix: str, tmp_path: Path, hosts=HOSTS) -> list[dict[str, str]]:
    return [
        cli_env(
            redis_url, prefix, tmp_path / host, DISPATCH_HOST=host,
            DISPATCH_CONFIG_DIR=str(tmp_path / "config"), DISPATCH_LOCK_MS="3000",
            DISPATCH_TRIGGER_EVERY="1s",
        )
        for host in hosts
    ]  # fmt: skip


def stamps(views: list[dict], tid: str) -> list[datetime]:
    return sorted(
        datetime.strptime(v["id"].removeprefix(f"{tid}."), "%Y%m%dT%H%M%SZ")
        for v in views
        if v["id"].startswith(f"{tid}.2")
    )


def completed(env: dict[str, str], tid: str) -> list[dict]:
    return [
        v
        for v in dispatch_json(env, "jobs", "--limit", "1000")
        if v["id"].startswith(f"{tid}.") and v["state"] == "completed"
    ]


def test_every_2_seconds_on_3_daemons_is_one_job_per_occurrence(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    every2 = {"id": "every2", "cron": "*/2 * * * * *", "overlap": "allow",
              "job": {"command": ["true"]}}  # fmt: skip
    write_triggers(tmp_path / "config", every2)
    fleet = envs(redis_url, prefix, tmp_path)
    with ExitStack() as stack:
        for env in fleet:
            stack.enter_context(daemon(env))
        # 20 seconds of occurrences, every one of them run
        eventually_sync(lambda: len(completed(fleet[0], "every2")) >= 10, timeout=60, every=0.5)
    views = dispatch_json(fleet[0], "jobs", "--limit", "1000")
    seen = stamps(views, "every2")
    gaps = {(b - a).total_seconds() for a, b in pairwise(seen)}
    assert gaps == {2.0}, seen  # none missed, none twice
    assert all(s.second % 2 == 0 for s in seen)
    runs = dispatch_json(fleet[0], "runs", "--limit", "1000")
    per_job = Counter(r["id"] for r in runs if r["id"].startswith("every2."))
    assert per_job and set(per_job.values()) == {1}  # each occurrence ran exactly once
    assert len({r["host"] for r in runs if r["id"].startswith("every2.")}) >= 2


def test_trigger_run_pause_and_resume_through_the_cli(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    yearly = {"id": "yearly", "cron": "0 0 1 1 *", "tz": "Europe/Amsterdam",
              "job": {"command": ["true"]}}  # fmt: skip
    write_triggers(tmp_path / "config", yearly)
    (env,) = envs(redis_url, prefix, tmp_path, hosts=("t1",))
    with daemon(env):
        pending = eventually_sync(lambda: pending_of(env), timeout=20)
        assert len(pending) == 1 and pending[0]["state"] == "delayed"
        ran = dispatch(env, "trigger", "run", "yearly")
        assert ran.returncode == 0, ran.stderr
        job_id = ran.stdout.strip()
        wait_state(env, job_id, "completed")
        why = dispatch(env, "why", job_id).stdout
        assert "minted by trigger yearly" in why
        rows = dispatch_json(env, "triggers")
        (row,) = rows["triggers"]
        assert row["last_job"] == job_id and row["next"] and rows["agreement"]["agreed"]
        doctor = dispatch(env, "doctor").stdout.splitlines()
        assert [line for line in doctor if " triggers " in line and "1 triggers, agreed" in line]

        paused = dispatch(env, "trigger", "pause", "yearly")
        assert paused.returncode == 0 and "1 pending" in paused.stdout, paused.stdout
        assert pending_of(env) == []
        assert dispatch_json(env, "triggers")["triggers"][0]["state"] == "paused"
        assert dispatch(env, "trigger", "resume", "yearly").returncode == 0
        eventually_sync(lambda: len(pending_of(env)) == 1, timeout=20)

    unknown = dispatch(env, "trigger", "run", "nope")
    assert unknown.returncode == 2 and "no trigger 'nope'" in unknown.stderr


def pending_of(env: dict[str, str]) -> list[dict]:
    views = dispatch_json(env, "jobs")
    return [v for v in views if v["id"].startswith("yearly.2") and v["state"] == "delayed"]
