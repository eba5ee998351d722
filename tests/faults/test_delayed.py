"""A due delayed job starts on a host with room even when the host that knew its due time is
full: that host passes the wake-up on rather than leaving the job to the next idle claim."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import redis as sync_redis

from dispatch.queue import keys
from tests.support.daemons import cli_env, daemon, dispatch, wait_state
from tests.support.polling import eventually_sync


def test_a_full_host_passes_a_due_job_to_one_with_room(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env_a = cli_env(redis_url, prefix, tmp_path / "a", DISPATCH_HOST="ha", DISPATCH_CONCURRENCY="1")
    env_b = cli_env(redis_url, prefix, tmp_path / "b", DISPATCH_HOST="hb", DISPATCH_CONCURRENCY="1")
    started = tmp_path / "started"
    with daemon(env_a), daemon(env_b):
        alive = sync_redis.Redis.from_url(redis_url)
        names = [keys.host_alive(h, prefix) for h in ("ha", "hb")]
        eventually_sync(lambda: alive.exists(*names) == 2, 20)  # both serve before it comes
        alive.close()
        due_s = time.time() + 4
        due = datetime.fromtimestamp(due_s, UTC).isoformat()
        delayed = dispatch(
            env_a, "submit", "--after", due, "--", "sh", "-c", f"date +%s%N > {started}"
        ).stdout.strip()
        # a's own queue keeps it busy past the due time
        dispatch(env_a, "submit", "--queue", "jobs@ha", "--", "sleep", "8")
        assert wait_state(env_a, delayed, "completed", "failed", timeout=30) == "completed"
    late_s = int(started.read_text()) / 1e9 - due_s
    assert late_s < 2.0  # not the 30 s idle claim of a host that never heard of it
