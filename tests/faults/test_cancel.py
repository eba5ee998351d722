"""`dispatch cancel` at any moment, through real daemon and CLI processes: a job waiting in the
gates behind another on its folder, and a running job whose run ends in a retry just as the
cancel lands, both end `cancelled` and never run again. The exact interleavings (a cancel
while a gate decides, one taken as the run's record is stored) are pinned in-process in
tests/daemon/test_processor.py, tests/test_client_cancel.py and tests/lua."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from dispatch.queue.keys import queue_keys
from tests.support.daemons import SOURCE, cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync

pytestmark = pytest.mark.e2e


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    return cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_HOST="c1")


def submit(env: dict[str, str], *args: str) -> str:
    done = dispatch(env, "submit", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def view_of(env: dict[str, str], job_id: str) -> dict[str, Any]:
    return next(v for v in dispatch_json(env, "jobs") if v["id"] == job_id)


def test_a_job_waiting_in_the_gates_is_cancelled_and_never_runs(
    env: dict[str, str], tmp_path: Path
) -> None:
    site, marks = tmp_path / "site", tmp_path / "marks"
    site.mkdir()
    marks.mkdir()
    holder_script = f"touch {marks}/holder; while [ ! -f {tmp_path}/release ]; do sleep 0.05; done"
    with daemon(env):
        holder = submit(env, "--folder", str(site), "--force", "--", "sh", "-c", holder_script)
        eventually_sync((marks / "holder").exists, 20)
        waiter = submit(env, "--folder", str(site), "--force", "--", "touch", str(marks / "waiter"))
        eventually_sync(lambda: (view_of(env, waiter)["defer"] or {}).get("reason"), 20)
        assert view_of(env, waiter)["reason"] == "scope-folder"
        answer = dispatch(env, "cancel", waiter)
        assert answer.returncode == 0, answer.stderr
        assert wait_state(env, waiter, "cancelled", "completed", "failed") == "cancelled"
        (tmp_path / "release").touch()  # the folder frees up: nothing of the waiter may start
        assert wait_state(env, holder, "completed", "failed") == "completed"
    assert view_of(env, waiter)["state"] == "cancelled"
    assert sorted(p.name for p in marks.iterdir()) == ["holder"]
    runs = dispatch_json(env, "runs")
    started = [r for r in runs if r["id"] == waiter and r.get("started_at")]
    assert started == []


def test_a_run_ending_in_retry_as_the_cancel_lands_is_cancelled_not_retried(
    env: dict[str, str], redis_url: str, prefix: str, tmp_path: Path
) -> None:
    trace, go = tmp_path / "trace", tmp_path / "go"
    # exit 1 is an infrastructure failure: retried while attempts remain
    script = f"echo run >> {trace}; while [ ! -f {go} ]; do sleep 0.02; done; exit 1"
    redis = Redis.from_url(redis_url)
    try:
        with daemon(env):
            job_id = submit(env, "--attempts", "3", "--", "sh", "-c", script)
            eventually_sync(trace.exists, 20)
            cancel = subprocess.Popen(
                [*SOURCE, "cancel", job_id], env=env, stdout=subprocess.PIPE, text=True
            )
            # the request stands in Redis; the run exits 1 before the daemon's next renewal
            eventually_sync(lambda: redis.hexists(queue_keys("jobs", prefix).cancel, job_id), 20)
            go.touch()
            out, _ = cancel.communicate(timeout=30)
            assert cancel.returncode == 0, out
            assert wait_state(env, job_id, "cancelled", "completed", "failed") == "cancelled"
    finally:
        redis.close()
    view = view_of(env, job_id)
    assert (view["reason"], view["attempt"]) == ("operator-cancel", 1)  # no attempt spent
    assert trace.read_text() == "run\n"  # and it never ran again
