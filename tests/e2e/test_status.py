"""`dispatch status` and `dispatch hosts` as an operator meets them: two real daemons on one
Redis running jobs, one job scheduled for later, a host that stopped beating a minute ago, the
fleet paused, and a Redis that cannot be reached."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, wait_state
from tests.support.polling import eventually_sync
from tests.support.redis_server import sync_client


def test_status_tells_the_fleet_in_plain_words_then_tables(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    envs = [
        cli_env(redis_url, prefix, tmp_path / h, DISPATCH_HOST=h, DISPATCH_CONCURRENCY="2")
        for h in ("s1", "s2")
    ]
    env = envs[0]
    redis = sync_client(redis_url)
    try:
        # a host that beat a minute ago and then went quiet
        redis.sadd(f"{prefix}:hosts", "old-box")
        redis.hset(f"{prefix}:hosts:seen", "old-box", int(time.time() * 1000) - 60_000)
        with ExitStack() as stack:
            for e in envs:
                stack.enter_context(daemon(e))
            sleepers = [dispatch(env, "submit", "--", "sleep", "30").stdout.strip() for _ in "ab"]
            later = dispatch(env, "submit", "--after", "+1h", "--", "true").stdout.strip()
            bad = dispatch(env, "submit", "--attempts", "1", "--", "sh", "-c", "exit 3")
            for job_id in sleepers:
                wait_state(env, job_id, "active")
            wait_state(env, later, "delayed")
            wait_state(env, bad.stdout.strip(), "failed")

            def both_beating() -> dict | None:  # a beat every 5 s carries the running jobs
                found = json.loads(dispatch(env, "status", "--json").stdout)
                live = [h for h in found["hosts"] if h["alive"] and h["slots"] == 2]
                named = {j["id"] for h in live for j in h["jobs"]}
                return found if len(live) == 2 and named == set(sleepers) else None

            found = eventually_sync(both_beating, 20)
            assert found["running"] == 2 and found["slots"] == 4 and found["paused"] == ""
            assert found["reasons"]["scheduled"]["count"] == 1

            shown = dispatch(env, "status")
            assert shown.returncode == 0, shown.stderr
            head, *_ = shown.stdout.split("\n\n")
            assert head == (
                "running: 2 of 4 slots on 2 hosts; 0 ready; 1 waiting (1 scheduled); "
                "paused: no; gone: old-box; 1 failed in the last hour (1 exit-3)"
            )
            sections = {b.split("\n")[0]: b for b in shown.stdout.split("\n\n")}
            assert {"QUEUES", "HOSTS", "RUNNING", "WAITING", "ENDED"} <= set(sections)
            for job_id in sleepers:
                assert job_id in sections["RUNNING"]
            [ended] = [r for r in sections["ENDED"].splitlines() if bad.stdout.strip() in r]
            assert ended.split()[1:4] == ["1", "infra", "exit-3"]
            promised = [h["promised"] for h in found["hosts"] if h["alive"]]
            assert all(p and p["memory_limit"] > 0 and p["cpus_limit"] > 0 for p in promised)

            hosts = dispatch(env, "hosts").stdout.split("\n\n")[0].splitlines()
            assert hosts[0].split()[:3] == ["HOST", "STATE", "RUNNING"]
            rows = {line.split()[0]: line.split() for line in hosts[1:]}
            assert rows["old-box"][1] == "gone" and "(1m ago)" in " ".join(rows["old-box"])
            assert rows["s1"][1] == "live" and rows["s1"][2] in ("0/2", "1/2", "2/2")

            assert dispatch(env, "pause").returncode == 0
            paused = dispatch(env, "status").stdout.splitlines()[0]
            assert "paused: yes, the whole fleet (dispatch resume)" in paused
            dispatch(env, "resume")
            for job_id in sleepers:
                dispatch(env, "cancel", job_id)
    finally:
        redis.close()

    away = cli_env("redis://127.0.0.1:9/0", prefix, tmp_path / "away")
    gone = dispatch(away, "status")
    assert gone.returncode == 1 and gone.stdout == ""
    assert len(gone.stderr.strip().splitlines()) == 1 and "Redis" in gone.stderr
