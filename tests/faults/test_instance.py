"""One daemon per host name and per state dir, as an operator meets it: real daemon processes on
a real Redis. A second daemon refuses to start with one line naming the first; a clean stop
frees both at once, and so does a crash for a restart in the same state dir; a daemon whose host
name another one took over (it was frozen past the hold's TTL) exits rather than run beside it;
and on one machine's Docker engine a host name runs one daemon, whatever Redis it uses.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis

from dispatch.queue.keys import host_keys
from dispatch.runners.docker import DockerClient
from dispatch.runners.docker.labels import LABEL_HOST
from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, wait_state
from tests.support.polling import eventually_sync

pytestmark = pytest.mark.e2e


@pytest.fixture
def env_of(redis_url: str, prefix: str, tmp_path: Path):
    def env(state: str, host: str, **extra: str) -> dict[str, str]:
        given = {"DISPATCH_LOCK_MS": "3000", "DISPATCH_SHUTDOWN_GRACE": "1s", **extra}
        return cli_env(redis_url, prefix, tmp_path / state, DISPATCH_HOST=host, **given)

    return env


@pytest.fixture
def owner_of(redis_url: str, prefix: str) -> Iterator[Any]:
    """The owner key's holder of a host name, decoded, or None."""
    with sync_redis.Redis.from_url(redis_url) as client:

        def owner(host: str) -> dict[str, Any] | None:
            raw = client.get(host_keys(host, prefix).owner)
            return json.loads(raw) if raw else None

        yield owner


def held_by(owner_of: Any, host: str, proc: subprocess.Popen[bytes]) -> bool:
    found = owner_of(host)
    return found is not None and found["pid"] == proc.pid


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr.strip()


def test_a_second_daemon_under_the_same_host_name_refuses_naming_the_first(env_of, owner_of):
    first_env, second_env = env_of("s1", "h1"), env_of("s2", "h1")
    with daemon(first_env) as first:
        eventually_sync(lambda: held_by(owner_of, "h1", first), 20)
        line = one_line(dispatch(second_env, "worker"))
        assert line.startswith(
            f"dispatch: host name h1 is held by another daemon (pid {first.pid} "
        )
        assert "another DISPATCH_HOST" in line
        assert first.poll() is None and held_by(owner_of, "h1", first)
        job_id = dispatch(first_env, "submit", "--", "true").stdout.strip()
        assert wait_state(first_env, job_id, "completed", "failed") == "completed"


def test_one_state_dir_under_two_host_names_is_refused_too(env_of, owner_of, tmp_path):
    with daemon(env_of("s1", "h1")) as first:
        eventually_sync(lambda: held_by(owner_of, "h1", first), 20)
        line = one_line(dispatch(env_of("s1", "h2"), "worker"))
        assert line.startswith(f"dispatch: state dir {tmp_path / 's1'} is in use by another daemon")
        assert f"(pid {first.pid} " in line and "host name h1" in line
        assert owner_of("h2") is None  # refused before it took anything


def test_a_clean_stop_frees_the_host_name_and_the_state_dir_at_once(env_of, owner_of):
    env = env_of("s1", "h1", DISPATCH_LOCK_MS="600000")  # a hold left behind would last 10 min
    with daemon(env) as first:
        eventually_sync(lambda: held_by(owner_of, "h1", first), 20)
    assert first.returncode == 0 and owner_of("h1") is None
    with daemon(env_of("s2", "h1")) as elsewhere:  # another state dir: no lapse to wait for
        eventually_sync(lambda: held_by(owner_of, "h1", elsewhere), 20)
    with daemon(env) as again:
        eventually_sync(lambda: held_by(owner_of, "h1", again), 20)


def test_a_restart_after_a_crash_takes_the_hold_over_at_once(env_of, owner_of):
    env = env_of("s1", "h1", DISPATCH_LOCK_MS="600000")
    with daemon(env) as first:
        eventually_sync(lambda: held_by(owner_of, "h1", first), 20)
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert owner_of("h1") is not None  # the dead daemon's hold is still there...
    refused = dispatch(env_of("s2", "h1"), "worker")  # ...and elsewhere it still counts
    lapse = re.search(
        r"if that daemon is dead, its hold lapses within (\d+)s\)$", one_line(refused)
    )
    assert lapse and 500 < int(lapse.group(1)) <= 600
    with daemon(env) as second:  # but it held this state dir's flock: it is dead
        eventually_sync(lambda: held_by(owner_of, "h1", second), 20)


@contextmanager
def frozen(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def test_a_daemon_whose_host_name_was_taken_over_exits(env_of, owner_of):
    with ExitStack() as stack, daemon(env_of("s1", "h1")) as first:
        eventually_sync(lambda: held_by(owner_of, "h1", first), 20)
        with frozen(first):
            eventually_sync(lambda: owner_of("h1") is None, 20)  # lapsed: the 3 s lock's TTL
            second = stack.enter_context(daemon(env_of("s2", "h1")))
            eventually_sync(lambda: held_by(owner_of, "h1", second), 20)
            first.send_signal(signal.SIGCONT)
            assert first.wait(timeout=30) == 1
            last = daemon_log(env_of("s1", "h1")).strip().splitlines()[-1]
            assert last.startswith(
                f"dispatch: host name h1 was taken over by another daemon (pid {second.pid} "
            )
            assert second.poll() is None and held_by(owner_of, "h1", second)


def test_a_daemon_of_another_fleet_under_the_same_name_leaves_the_engine_alone(
    redis_url: str, prefix: str, tmp_path: Path, image: str, docker_host: str, host_label: str
) -> None:
    """An operator's `dispatch up` beside the service, on its own Redis (here: its own prefix),
    sees none of the service's claims: it must not start and reap the service's containers."""

    def env(fleet: str) -> dict[str, str]:
        return cli_env(
            redis_url, fleet, tmp_path / fleet, DISPATCH_RUNNER="docker", DISPATCH_HOST=host_label,
            DISPATCH_IMAGE=image, DISPATCH_SHUTDOWN_GRACE="1s", DISPATCH_STOP_GRACE="1s",
        )  # fmt: skip

    service = env(prefix)
    with daemon(service) as first:
        job_id = dispatch(service, "submit", "--", "sleep", "300").stdout.strip()
        assert wait_state(service, job_id, "active", timeout=60) == "active"
        running = eventually_sync(lambda: containers(docker_host, host_label), 60)
        line = one_line(dispatch(env(prefix + "x"), "worker"))
        assert line.startswith(
            f"dispatch: host name {host_label} already runs a daemon on this machine's Docker"
        )
        assert f"(pid {first.pid})" in line
        assert containers(docker_host, host_label) == running
        assert dispatch(service, "cancel", job_id).returncode == 0
        assert wait_state(service, job_id, "cancelled", timeout=60) == "cancelled"


def containers(docker_host: str, host: str) -> list[str]:
    async def ids() -> list[str]:
        async with DockerClient(docker_host) as client:
            return [c["Id"] for c in await client.list_containers({LABEL_HOST: host})]

    return asyncio.run(ids())
