"""Locks under faults, with real daemon processes: Redis behind a proxy that goes silent, a
daemon frozen with SIGSTOP past its lock, a lock too short for the grace.

Each job's command leaves a trace (start, stop, end lines with its pid) and instants in
nanoseconds, so a test can tell how many runs there were and when one was stopped.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import redis as sync_redis

from dispatch.queue.keys import queue_keys
from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync
from tests.support.redis_proxy import RedisProxy

# lock 3 s, grace 0.5 s, renewal every 0.5 s: with Redis silent, a run is stopped 1.25 s after
# its last renewal was sent, and killed at 2.75 s; the lock itself lapses at 3 s.
FAST = {
    "DISPATCH_LOCK_MS": "3000",
    "DISPATCH_STOP_GRACE": "0.5s",
    "DISPATCH_RENEW_EVERY": "0.5s",
    "DISPATCH_SHUTDOWN_GRACE": "1s",
}


def traced(trace: Path, body: str) -> list[str]:
    """A job that logs `start <pid>`, `term <pid>` on SIGTERM and `end <pid>` to `trace`."""
    script = (
        f"echo start $$ >> {trace}; "
        f"trap 'date +%s%N > {trace}.stopped; echo term $$ >> {trace}; exit 143' TERM; "
        f"{body}; echo end $$ >> {trace}"
    )
    return ["--", "sh", "-c", script]


def lines(trace: Path) -> list[str]:
    return [line.split()[0] for line in trace.read_text().splitlines()] if trace.exists() else []


def job_hash(redis_url: str, prefix: str, key: str, job_id: str) -> str | None:
    client = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        found = client.hget(getattr(queue_keys("jobs", prefix), key), job_id)
    finally:
        client.close()
    return str(found) if found is not None else None


def test_an_outage_shorter_than_the_stop_point_lets_the_run_finish_once(
    redis_url: str, prefix: str, tmp_path: Path, proxy: RedisProxy
) -> None:
    # a 6 s lock: the stop point is 4.25 s after the last renewal was sent
    env = cli_env(
        proxy.url,
        prefix,
        tmp_path / "s",
        DISPATCH_HOST="h1",
        **{**FAST, "DISPATCH_LOCK_MS": "6000"},
    )
    trace = tmp_path / "trace"
    with daemon(env):
        job_id = dispatch(env, "submit", *traced(trace, "sleep 4")).stdout.strip()
        eventually_sync(lambda: lines(trace) == ["start"], 20)
        with proxy.fault("blackhole"):
            time.sleep(2.5)  # the outage itself, well inside the stop point
        assert wait_state(env, job_id, "completed", "failed", timeout=40) == "completed"
    assert lines(trace) == ["start", "end"]
    records = [r for r in dispatch_json(env, "runs") if r["id"] == job_id]
    assert [(r["outcome"], r["attempt"]) for r in records] == [("completed", 1)]


def test_a_long_outage_stops_the_run_before_its_lock_lapses_and_spends_nothing(
    redis_url: str, prefix: str, tmp_path: Path, proxy: RedisProxy
) -> None:
    env = cli_env(
        proxy.url, prefix, tmp_path / "s", DISPATCH_HOST="h1", DISPATCH_SWEEP_EVERY="60s", **FAST
    )
    trace, first = tmp_path / "trace", tmp_path / "first"
    body = f"if [ ! -e {first} ]; then touch {first}; sleep 30 & wait; fi"
    with daemon(env):
        job_id = dispatch(env, "submit", *traced(trace, body)).stdout.strip()
        eventually_sync(lambda: lines(trace) == ["start"], 20)
        went_silent_ns = time.time_ns()
        with proxy.fault("blackhole"):
            stopped_ns = int(eventually_sync(lambda: _read(tmp_path / "trace.stopped"), 10))
            time.sleep(4.0)  # the rest of the outage: well past the 3 s lock
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
    # Stopped, by the grace's TERM, before the lock (3 s from the last renewal) could lapse.
    assert stopped_ns - went_silent_ns < 3_000_000_000
    assert lines(trace) == ["start", "term", "start", "end"]
    assert job_hash(redis_url, prefix, "attempts", job_id) is None  # no attempt was spent
    assert job_hash(redis_url, prefix, "stalls", job_id) is None  # handed back, not swept
    records = [r for r in dispatch_json(env, "runs") if r["id"] == job_id]
    assert [(r["outcome"], r["attempt"]) for r in records][-1] == ("completed", 1)


def test_a_frozen_daemon_loses_its_job_and_kills_the_stale_run_when_it_wakes(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    fleet = {**FAST, "DISPATCH_SWEEP_EVERY": "0.5s"}
    env_a = cli_env(redis_url, prefix, tmp_path / "a", DISPATCH_HOST="ha", **fleet)
    env_b = cli_env(redis_url, prefix, tmp_path / "b", DISPATCH_HOST="hb", **fleet)
    trace = tmp_path / "trace"
    with daemon(env_a) as frozen:
        job_id = dispatch(env_a, "submit", *traced(trace, "sleep 6")).stdout.strip()
        eventually_sync(lambda: lines(trace) == ["start"], 20)
        stale_pid = int(trace.read_text().split()[1])
        frozen.send_signal(signal.SIGSTOP)
        try:
            with daemon(env_b):
                eventually_sync(lambda: lines(trace).count("start") == 2, 20)
                frozen.send_signal(signal.SIGCONT)
                eventually_sync(lambda: not _alive(stale_pid), 2.0)
                assert wait_state(env_b, job_id, "completed", "failed", timeout=40) == "completed"
        finally:
            frozen.send_signal(signal.SIGCONT)
    records = [r for r in dispatch_json(env_b, "runs") if r["id"] == job_id]
    assert [(r["host"], r["outcome"]) for r in records] == [("hb", "completed")]


def _read(path: Path) -> str:
    """What a job wrote, once it is all there (the shell creates the file, then writes)."""
    return path.read_text().strip() if path.exists() else ""


def test_a_claim_read_after_its_lock_lapsed_is_handed_back_not_run(
    redis_url: str, prefix: str, tmp_path: Path, proxy: RedisProxy
) -> None:
    """Redis granted the claim, but the daemon read the reply 5 s later (frozen, overloaded):
    the lock lapsed meanwhile and another host runs the job; the late reader must not."""
    late = cli_env(proxy.url, prefix, tmp_path / "a", DISPATCH_HOST="ha", **FAST)
    env_b = cli_env(redis_url, prefix, tmp_path / "b", DISPATCH_HOST="hb", **FAST)
    env_b["DISPATCH_SWEEP_EVERY"] = "0.5s"
    late["DISPATCH_SWEEP_EVERY"] = "60s"  # the other host sweeps and takes the job
    trace = tmp_path / "trace"
    with daemon(late):
        eventually_sync(lambda: "worker_started" in daemon_log(late), 20)
        with proxy.lagging(5.0):
            job_id = dispatch(env_b, "submit", *traced(trace, "sleep 2")).stdout.strip()
            lock = lambda: job_hash(redis_url, prefix, "lock", job_id) or ""  # noqa: E731
            eventually_sync(lambda: lock().startswith("ha:"), 60)  # granted, not yet read
            with daemon(env_b):
                eventually_sync(lambda: f'"job":"{job_id}"' in daemon_log(late), 30)
                assert wait_state(env_b, job_id, "completed", "failed", timeout=40) == "completed"
    assert lines(trace) == ["start", "end"]
    records = [r for r in dispatch_json(env_b, "runs") if r["id"] == job_id]
    assert [(r["host"], r["outcome"]) for r in records] == [("hb", "completed")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_lock_too_short_for_the_grace_is_refused_with_one_line(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(
        redis_url, prefix, tmp_path / "s", DISPATCH_LOCK_MS="3000", DISPATCH_STOP_GRACE="10s"
    )
    done = dispatch(env, "worker")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "DISPATCH_LOCK_MS" in done.stderr
