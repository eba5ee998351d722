"""`dispatch pause` holds the whole fleet, through real daemon and CLI processes: queues that
did not exist when it was given (a host that joins later, a queue first used later) start
nothing until `dispatch resume`, and then everything runs.

That a daemon has looked for work is proven, not waited for: a probe job due one second after
submit moves from `delayed` to `waiting` only inside a claim call (job_claim promotes before it
checks the pause), and that same call would have claimed the ready job ahead of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import Redis

from dispatch.queue.keys import queue_keys
from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, state_of, wait_state
from tests.support.polling import eventually_sync

pytestmark = pytest.mark.e2e


def submit(env: dict[str, str], *args: str) -> str:
    done = dispatch(env, "submit", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_queues_new_after_the_pause_start_nothing_until_resume(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    marks, site = tmp_path / "marks", tmp_path / "site"
    marks.mkdir()
    site.mkdir()
    h2, h3 = (
        cli_env(redis_url, prefix, tmp_path / host, DISPATCH_HOST=host) for host in ("h2", "h3")
    )
    assert dispatch(h2, "pause").returncode == 0
    # jobs@h3 gets its first job after the pause, before its host's daemon has started
    early = submit(h3, "--queue", "jobs@h3", "--", "touch", str(marks / "early"))
    probe3 = submit(h3, "--queue", "jobs@h3", "--after", "+1s", "--", "true")
    redis = Redis.from_url(redis_url)
    try:
        with daemon(h2), daemon(h3):
            # h2 joins after the pause: its own queue is paused by its daemon, before any claim
            eventually_sync(lambda: redis.exists(queue_keys("jobs@h2", prefix).paused), 20)
            local = submit(
                h2, "--folder", str(site), "--force", "--", "touch", str(marks / "local")
            )
            probe2 = submit(h2, "--queue", "jobs@h2", "--after", "+1s", "--", "true")
            shared = submit(h2, "--", "touch", str(marks / "shared"))
            for probe in (probe2, probe3):
                assert wait_state(h2, probe, "waiting", "completed", timeout=20) == "waiting"
            assert [state_of(h2, i) for i in (local, early, shared)] == ["waiting"] * 3
            assert list(marks.iterdir()) == []
            said_by_the_fleet_pause(h2, local)
            assert dispatch(h2, "resume").returncode == 0
            for job_id in (local, early, shared, probe2, probe3):
                assert wait_state(h2, job_id, "completed", "failed") == "completed"
    finally:
        redis.close()
    assert sorted(p.name for p in marks.iterdir()) == ["early", "local", "shared"]


def said_by_the_fleet_pause(env: dict[str, str], job_id: str) -> None:
    table = dispatch(env, "jobs")
    assert table.returncode == 0 and "The fleet is paused" in table.stdout
    assert "from h2" in table.stdout  # who gave it
    assert "The fleet is paused" in dispatch(env, "why", job_id).stdout
    views = {v["id"]: v for v in dispatch_json(env, "jobs")}
    assert views[job_id]["paused"] == "fleet"
