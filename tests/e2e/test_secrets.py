"""Secrets by reference through real daemons, the real engine and real Redis: the value is in
the container and nowhere dispatch writes (every Redis key, runs.jsonl, the daemon's log, the
output file, what the CLI shows), whatever the run did with it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.queue.connect import redis_client
from tests.support.daemons import (
    daemon,
    daemon_log,
    dispatch,
    dispatch_json,
    docker_env,
    wait_state,
)
from tests.support.polling import eventually_sync

VALUE = "sk-e2e-" + secrets.token_urlsafe(24)  # random: found only where it leaked
HASH = hashlib.sha256(VALUE.encode()).hexdigest()
# the job proves it has the value (its hash), then prints it and fails: the worst a job can do
GRACE_S = 1.0
LEAKY = 'printf %s "$TOKEN" | sha256sum; echo "token=$TOKEN"; echo "$TOKEN" >&2; exit 1'


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path, image: str, host_label: str) -> dict[str, str]:
    return docker_env(
        redis_url, prefix, tmp_path / "state", host_label, image, DISPATCH_STOP_GRACE=f"{GRACE_S}s"
    )


def profiles(env: dict[str, str], tmp_path: Path, mode: int = 0o600) -> None:
    """secrets.json with a file profile (`disk`), a command profile printing the same value
    (`cmd`), one whose stderr holds it as it fails (`loud`) and a slow one (`slow`)."""
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"api": VALUE}))
    values.chmod(mode)
    (tmp_path / "reveal").write_text(VALUE)
    printer = tool(tmp_path, "printer", f'cat {tmp_path / "reveal"}; echo " for $1" >&2')
    loud = tool(tmp_path, "loud", f"cat {tmp_path / 'reveal'} >&2; exit 3")
    slow = tool(tmp_path, "slow", f"echo $$ > {tmp_path / 'slow.pid'}; exec sleep 60")
    document = {
        "version": 1,
        "profiles": {
            "disk": {"file": str(values)},
            "cmd": {"command": [printer, "{name}"]},
            "loud": {"command": [loud]},
            "slow": {"command": [slow], "timeoutMs": 120_000},
        },
    }
    config = Path(env["DISPATCH_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "secrets.json").write_text(json.dumps(document))


def tool(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def submit(env: dict[str, str], image: str, script: str, *secret: str) -> str:
    flags = [f for ref in secret for f in ("--secret", ref)]
    done = dispatch(
        env, "submit", "--image", image, "--attempts", "1", *flags, "--", "sh", "-c", script
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def redis_contents(redis_url: str) -> bytes:
    """Every key of the server, as DUMP serialises it and as its type reads it (DUMP may
    compress a value, which would hide a leak from a byte search)."""

    async def read() -> bytes:
        async with redis_client(redis_url, socket_timeout=30) as redis:
            found = []
            async for key in redis.scan_iter(count=1000):
                found += [key, await redis.dump(key) or b"", await _read(redis, key)]
            return b"\n".join(found)

    return asyncio.run(read())


async def _read(redis: Redis, key: bytes) -> bytes:
    kind = _text(await redis.type(key))
    if kind == "string":
        value = await redis.get(key)
        return value if isinstance(value, bytes) else b""
    if kind == "hash":
        return repr(await redis.hgetall(key)).encode()
    if kind == "list":
        return repr(await redis.lrange(key, 0, -1)).encode()
    if kind == "set":
        return repr(await redis.smembers(key)).encode()
    if kind == "zset":
        return repr(await redis.zrange(key, 0, -1, withscores=True)).encode()
    if kind == "stream":
        return repr(await redis.xrange(key)).encode()
    return b""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def assert_nowhere(env: dict[str, str], redis_url: str, job_id: str) -> None:
    state = Path(env["DISPATCH_STATE_DIR"])
    places = {
        "redis": redis_contents(redis_url),
        "runs.jsonl": (state / "runs.jsonl").read_bytes(),
        "daemon log": daemon_log(env).encode(),
        "why": dispatch(env, "why", job_id, "--json").stdout.encode(),
        "jobs": dispatch(env, "jobs", "--json").stdout.encode(),
        "runs": dispatch(env, "runs", "--json").stdout.encode(),
    }
    outputs = state / "output"
    for path in outputs.iterdir() if outputs.exists() else ():
        places[path.name] = path.read_bytes()
    leaked = [where for where, data in places.items() if VALUE.encode() in data]
    assert leaked == []


def test_the_value_is_in_the_container_and_nowhere_else_after_a_failed_run(
    env: dict[str, str], tmp_path: Path, image: str, redis_url: str
) -> None:
    profiles(env, tmp_path)
    with daemon(env):
        failing = submit(env, image, LEAKY, "TOKEN=disk/api")
        passing = submit(env, image, 'printf %s "$TOKEN" | sha256sum', "TOKEN=cmd/api")
        assert wait_state(env, failing, "failed", "completed", timeout=60) == "failed"
        assert wait_state(env, passing, "failed", "completed", timeout=60) == "completed"
    records = {r["id"]: r for r in dispatch_json(env, "runs")}
    assert (records[failing]["outcome"], records[failing]["reason"]) == ("infra", "exit-1")
    for job_id in (failing, passing):
        assert HASH in Path(records[job_id]["output"]).read_text()
    assert "token=***" in Path(records[failing]["output"]).read_text()
    assert b"disk/api" in redis_contents(redis_url)  # the reference is what is stored
    assert_nowhere(env, redis_url, failing)


def test_a_resolver_failure_is_retried_with_its_reason_and_its_stderr_kept_nowhere(
    env: dict[str, str], tmp_path: Path, image: str, redis_url: str
) -> None:
    profiles(env, tmp_path)
    with daemon(env):
        job_id = submit(env, image, "echo never", "TOKEN=loud/api")
        assert wait_state(env, job_id, "failed", "completed", timeout=60) == "failed"
    story = dispatch_json(env, "why", job_id)
    assert story["reason"] == "secret-unresolved: loud/api: loud exited 3"
    assert_nowhere(env, redis_url, job_id)


def test_a_file_others_may_read_is_refused_and_the_doctor_says_so(
    env: dict[str, str], tmp_path: Path, image: str, redis_url: str
) -> None:
    profiles(env, tmp_path, mode=0o644)
    with daemon(env):
        job_id = submit(env, image, "echo never", "TOKEN=disk/api")
        assert wait_state(env, job_id, "failed", "completed", timeout=60) == "failed"
    reason = dispatch_json(env, "why", job_id)["reason"]
    assert reason.startswith(
        "secret-unresolved: disk/api: the file of profile 'disk' has mode 0644"
    )
    doctor = dispatch(env, "doctor").stdout.splitlines()
    secret_lines = sorted(
        line.split(None, 2)[0] + " " + line.split()[3] for line in doctor if " secret " in line
    )
    assert secret_lines == ["FAIL disk:", "ok cmd:", "ok loud:", "ok slow:"]
    assert_nowhere(env, redis_url, job_id)


def test_an_unknown_profile_is_refused_before_anything_is_spent(
    env: dict[str, str], tmp_path: Path, image: str
) -> None:
    profiles(env, tmp_path)
    with daemon(env):
        job_id = submit(env, image, "echo never", "TOKEN=nope/api", "OTHER=slow/x")
        assert wait_state(env, job_id, "failed", "completed", timeout=60) == "failed"
    (record,) = dispatch_json(env, "runs")
    assert (record["outcome"], record["reason"]) == ("policy", "secret-profile-unknown")
    assert "started_at" not in record and "container" not in record
    assert not (tmp_path / "slow.pid").exists()  # no resolver ran


def test_cancel_during_a_slow_resolver_ends_the_job_cancelled_within_the_grace(
    env: dict[str, str], tmp_path: Path, image: str
) -> None:
    profiles(env, tmp_path)
    pid_file = tmp_path / "slow.pid"
    with daemon(env):
        job_id = submit(env, image, "echo never", "TOKEN=slow/api")
        resolver = int(eventually_sync(lambda: pid_file.exists() and pid_file.read_text(), 60))
        asked = time.monotonic()
        assert dispatch(env, "cancel", job_id).returncode == 0
        assert (
            wait_state(env, job_id, "cancelled", "failed", "completed", timeout=10) == "cancelled"
        )
        # the stop grace (1 s) and some slack for the CLI's own round trips
        assert time.monotonic() - asked < GRACE_S + 3
        eventually_sync(lambda: not _running(resolver), 5)
    assert dispatch_json(env, "runs") == []  # nothing started: no run to record


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"


def test_submit_warns_in_one_line_of_a_plain_credential_and_keeps_its_exit_code(
    env: dict[str, str],
) -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4
    done = dispatch(env, "submit", "--after", "+1h", "--env", f"GH={token}", "--", "true")
    assert done.returncode == 0 and done.stdout.strip()
    assert done.stderr.count("\n") == 1 and "GH (ghp_)" in done.stderr and token not in done.stderr
    plain = dispatch(env, "submit", "--after", "+1h", "--env", "MODE=fast", "--", "true")
    assert plain.returncode == 0 and plain.stderr == ""


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--secret", "TOKEN"], "expected NAME=<profile>/<name>"),
        (["--secret", "TOKEN=no-slash"], "is not <profile>/<name>"),
        (["--secret", "TOKEN=vault/-rf"], "is not <profile>/<name>"),
        (["--env", "TOKEN=x", "--secret", "TOKEN=vault/a"], "--env sets it too"),
    ],
)
def test_a_bad_secret_flag_is_refused_in_one_line(
    env: dict[str, str], args: list[str], why: str
) -> None:
    done = dispatch(env, "submit", *args, "--", "true")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and why in done.stderr
    assert dispatch_json(env, "jobs") == []
