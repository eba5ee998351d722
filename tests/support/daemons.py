"""Daemons and CLI calls as real processes, the way an operator runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.polling import eventually_sync


def cli_env(redis_url: str | None, prefix: str, state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    env.update(
        DISPATCH_PREFIX=prefix,
        DISPATCH_STATE_DIR=str(state),
        DISPATCH_CONFIG_DIR=str(state / "config"),  # never the operator's own config
        DISPATCH_RUNNER="process",
    )
    if redis_url:
        env["DISPATCH_REDIS_URL"] = redis_url
    env.update(extra)
    return env


def dispatch(
    env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dispatch", *args],
        env=env,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
    )


def dispatch_json(env: dict[str, str], *args: str) -> Any:
    done = dispatch(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@contextmanager
def daemon(env: dict[str, str], command: str = "worker") -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatch", command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr:
            proc.stderr.close()


def state_of(env: dict[str, str], job_id: str) -> str:
    views = dispatch_json(env, "jobs")
    return next((v["state"] for v in views if v["id"] == job_id), "missing")


def wait_state(env: dict[str, str], job_id: str, *states: str, timeout: float = 30.0) -> str:
    return eventually_sync(lambda: (s := state_of(env, job_id)) in states and s, timeout)
