"""The Docker engine unreachable when a job is picked up, with a real daemon process.

The daemon's DOCKER_HOST is a path where no socket is yet; the engine "comes back" when the
test links that path to the real engine's socket. A job picked up meanwhile is held
`engine-unavailable`, spending no attempt (each job here has one attempt only, so a spent one
would fail it), and runs once the engine answers; past DISPATCH_ENGINE_WAIT_MAX it takes the
infra path instead.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemons import (
    cli_env,
    daemon,
    daemon_log,
    dispatch,
    dispatch_json,
    wait_state,
)
from tests.support.polling import eventually_sync

pytestmark = pytest.mark.slow


@pytest.fixture
def link() -> Iterator[Path]:
    """A short path for the engine's socket (a unix socket path has at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="dk") as short:
        yield Path(short) / "docker.sock"


def engine_env(
    redis_url: str, prefix: str, state: Path, link: Path, image: str, **extra: str
) -> dict[str, str]:
    return cli_env(
        redis_url,
        prefix,
        state,
        DISPATCH_RUNNER="docker",
        DOCKER_HOST=f"unix://{link}",
        DISPATCH_IMAGE=image,
        DISPATCH_LOCK_MS="4500",  # 3 x (stop grace + renewal period)
        DISPATCH_SHUTDOWN_GRACE="1s",
        DISPATCH_STOP_GRACE="1s",
        **extra,
    )


def why(env: dict[str, str], job_id: str) -> Any:
    return dispatch_json(env, "why", job_id)


def held_and_rechecked(env: dict[str, str], job_id: str) -> Any:
    """The job's view once it has been held, and picked up and held again at least once."""
    view = why(env, job_id)
    defer = view["defer"] or {}
    again = defer.get("since") and defer["since"] != defer["at"]
    return view if view["state"] == "delayed" and again else None


def engine_goes_away_after_boot(env: dict[str, str], link: Path, docker_host: str) -> None:
    """A daemon claims nothing until its boot has reaped with the engine, so the engine is there
    for the boot and goes away once the daemon serves."""
    os.symlink(docker_host.removeprefix("unix://"), link)
    eventually_sync(lambda: '"worker_started"' in daemon_log(env), 30)
    link.unlink()
    # A pooled connection outlives the link: let it pass httpx's 5 s keep-alive expiry, idle,
    # so the next engine call needs a new connection and finds no engine.
    time.sleep(6)


def test_a_job_waits_for_the_engine_and_runs_once_it_answers(
    redis_url: str, prefix: str, tmp_path: Path, link: Path, docker_host: str, image: str
) -> None:
    env = engine_env(redis_url, prefix, tmp_path / "state", link, image)
    with daemon(env):
        engine_goes_away_after_boot(env, link, docker_host)
        job_id = dispatch(env, "submit", "--attempts", "1", "--", "echo", "hi").stdout.strip()
        view = eventually_sync(lambda: held_and_rechecked(env, job_id), 30)
        assert (view["reason"], view["attempt"]) == ("engine-unavailable", 1)
        assert dispatch_json(env, "runs") == []  # nothing ran, nothing recorded
        os.symlink(docker_host.removeprefix("unix://"), link)
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed", why(
            env, job_id
        )
    (record,) = dispatch_json(env, "runs")
    assert (record["attempt"], record["outcome"], record["exit_code"]) == (1, "completed", 0)
    assert Path(record["output"]).read_text() == "hi\n"


def test_past_the_wait_bound_the_job_takes_the_infra_path(
    redis_url: str, prefix: str, tmp_path: Path, link: Path, docker_host: str
) -> None:
    env = engine_env(
        redis_url, prefix, tmp_path / "state", link, "any:1", DISPATCH_ENGINE_WAIT_MAX="3s"
    )
    with daemon(env):
        engine_goes_away_after_boot(env, link, docker_host)
        job_id = dispatch(env, "submit", "--attempts", "1", "--", "true").stdout.strip()
        assert wait_state(env, job_id, "failed", "completed", timeout=60) == "failed"
    view = why(env, job_id)
    assert (view["result"]["outcome"], view["reason"]) == ("infra", "docker-unavailable")
    assert view["defer"]["reason"] == "engine-unavailable"  # it was held first
    (record,) = dispatch_json(env, "runs")
    assert (record["outcome"], record["reason"]) == ("infra", "docker-unavailable")
    assert record.get("started_at") is None
