"""Captured output with a real daemon: pruned by age from boot on, named by attempt and fence,
and a prune that fails never stops the daemon."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync


def aged(path: Path, days: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("out\n")
    at = time.time() - days * 86_400
    os.utime(path, (at, at))
    return path


def submit(env: dict[str, str]) -> str:
    done = dispatch(env, "submit", "--", "echo", "hi")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_old_output_goes_at_boot_and_a_runs_file_is_named_by_attempt_and_fence(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    old = aged(state / "output" / "old.1.log", 15)  # a name from before the fence
    recent = aged(state / "output" / "recent.1.7.log", 13)
    env = cli_env(redis_url, prefix, state)
    with daemon(env):
        eventually_sync(lambda: not old.exists(), timeout=20)
        job_id = submit(env)
        assert wait_state(env, job_id, "completed", "failed") == "completed"
    (record,) = dispatch_json(env, "runs")
    output = Path(record["output"])
    assert output.parent == state / "output" and output.read_text() == "hi\n"
    job, attempt, fence, ext = output.name.rsplit(".", 3)
    assert (job, attempt, ext) == (job_id, "1", "log") and fence.isdigit()
    assert recent.exists()
    assert '"event":"output_pruned","files":1' in daemon_log(env)


def test_a_prune_that_fails_is_logged_and_the_daemon_runs_jobs(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "output").write_text("a file where the folder should be")
    env = cli_env(redis_url, prefix, state)
    with daemon(env) as proc:
        eventually_sync(lambda: "output_prune_failed" in daemon_log(env), timeout=20)
        job_id = submit(env)
        assert wait_state(env, job_id, "completed", "failed") == "completed"
        assert proc.poll() is None
    (record,) = dispatch_json(env, "runs")
    assert record["output_lost"] is True  # the output could not be written either; the job ran
