"""Daemons and CLI calls as real processes, the way an operator runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.polling import eventually_sync

# the checkout's CLI; tests/e2e/test_wheel.py passes the one a built wheel installed instead
SOURCE = (sys.executable, "-m", "dispatch")
# one job network per test session, never the operator's own (tests/support/docker.py removes
# it and its firewall rules when the session ends)
TEST_NETWORK = f"dispatch-t{os.getpid()}"


def cli_env(redis_url: str | None, prefix: str, state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    env.update(
        DISPATCH_PREFIX=prefix,
        DISPATCH_STATE_DIR=str(state),
        DISPATCH_CONFIG_DIR=str(state / "config"),  # never the operator's own config
        DISPATCH_RUNNER="process",
        # quick stops and renewals, so a short DISPATCH_LOCK_MS (3 s) passes its floor
        DISPATCH_STOP_GRACE="0.5s",
        DISPATCH_RENEW_EVERY="0.5s",
        DISPATCH_JOB_NETWORK=TEST_NETWORK,
        DISPATCH_EGRESS_PORT="0",  # two daemons of a test share the network, not a port
    )
    if redis_url:
        env["DISPATCH_REDIS_URL"] = redis_url
    env.update(extra)
    return env


def docker_env(
    redis_url: str, prefix: str, state: Path, host: str, image: str, **extra: str
) -> dict[str, str]:
    """`cli_env` for a daemon on the docker runner, with the short lock and graces the engine
    tests share (lock 4.5 s = 3 x (stop grace + renewal period))."""
    settings = {
        "DISPATCH_RUNNER": "docker",
        "DISPATCH_HOST": host,
        "DISPATCH_IMAGE": image,
        "DISPATCH_LOCK_MS": "4500",
        "DISPATCH_SHUTDOWN_GRACE": "1s",
        "DISPATCH_STOP_GRACE": "1s",
    }
    return cli_env(redis_url, prefix, state, **{**settings, **extra})


def dispatch(
    env: dict[str, str], *args: str, stdin: bytes | None = None, program: Sequence[str] = SOURCE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*program, *args],
        env=env,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
    )


def dispatch_json(env: dict[str, str], *args: str, program: Sequence[str] = SOURCE) -> Any:
    done = dispatch(env, *args, "--json", program=program)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@contextmanager
def daemon(
    env: dict[str, str], command: str = "worker", program: Sequence[str] = SOURCE
) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon process; its log goes to `log_path(env)` (a pipe nobody reads would fill and
    block the daemon)."""
    with open(log_path(env), "ab") as log:
        proc = subprocess.Popen([*program, command], env=env, stdout=log, stderr=log)
    try:
        yield proc
    finally:
        stop(proc, 40)


def stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL once `timeout` has passed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def log_path(env: dict[str, str], kind: str = "daemon") -> Path:
    """Beside the state dir, not in it: a test may fill the state dir's disk."""
    state = Path(env["DISPATCH_STATE_DIR"])
    state.parent.mkdir(parents=True, exist_ok=True)
    return state.with_name(f"{state.name}.{kind}.log")


def daemon_log(env: dict[str, str], kind: str = "daemon") -> str:
    path = log_path(env, kind)
    return path.read_text(errors="replace") if path.exists() else ""


def stopped_log(proc: subprocess.Popen[bytes], env: dict[str, str]) -> str:
    """Stop the daemon and return what it logged."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=40)
    return daemon_log(env)


def state_of(env: dict[str, str], job_id: str, program: Sequence[str] = SOURCE) -> str:
    views = dispatch_json(env, "jobs", program=program)
    return next((v["state"] for v in views if v["id"] == job_id), "missing")


def wait_state(
    env: dict[str, str],
    job_id: str,
    *states: str,
    timeout: float = 30.0,
    program: Sequence[str] = SOURCE,
) -> str:
    return eventually_sync(lambda: (s := state_of(env, job_id, program)) in states and s, timeout)
