"""A daemon killed after its job's command ended but before Redis had the record: the restarted
daemon finds the record in this host's run log, and the job ends as it ran instead of running
a second time."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync
from tests.support.redis_proxy import RedisProxy


def test_a_run_that_ended_before_its_daemon_died_is_not_run_again(
    redis_url: str, prefix: str, tmp_path: Path, proxy: RedisProxy
) -> None:
    env = cli_env(
        proxy.url, prefix, tmp_path / "s", DISPATCH_HOST="h1", DISPATCH_LOCK_MS="3000",
        DISPATCH_SWEEP_EVERY="0.5s",
    )  # fmt: skip
    marker, go = tmp_path / "marker", tmp_path / "go"
    script = f"echo run >> {marker}; while [ ! -e {go} ]; do sleep 0.05; done"
    runs_log = tmp_path / "s" / "runs.jsonl"
    with daemon(env) as first:
        job_id = dispatch(env, "submit", "--", "sh", "-c", script).stdout.strip()
        eventually_sync(lambda: marker.exists() and marker.read_text() == "run\n", 20)
        with proxy.fault("blackhole"):  # Redis away: the record cannot leave this host
            go.touch()
            eventually_sync(lambda: runs_log.exists() and job_id in runs_log.read_text(), 20)
            first.send_signal(signal.SIGKILL)
            first.wait()
    with daemon(env):
        assert wait_state(env, job_id, "completed", "failed", timeout=40) == "completed"
    assert marker.read_text() == "run\n"  # it ran once
    records = [r for r in dispatch_json(env, "runs") if r["id"] == job_id]
    assert [(r["outcome"], r["attempt"]) for r in records] == [("completed", 1)]
