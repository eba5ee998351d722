"""Waiting for a condition, end to end: real daemons, the operator's own check scripts, the CLI."""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

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
from tests.support.redis_server import sync_client

INTERVAL_S = 30  # DISPATCH_WAIT_INTERVAL's floor: the shortest a test can make it
INTERVAL = {"DISPATCH_WAIT_INTERVAL": f"{INTERVAL_S}s"}


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    state, interval = tmp_path / "state", f"{INTERVAL_S}s"
    return cli_env(
        redis_url, prefix, state, DISPATCH_HOST="cli-host", DISPATCH_WAIT_INTERVAL=interval
    )


def check_script(folder: Path, body: str) -> Path:
    """An operator's check: a Python script, run by the daemon with a scrubbed environment."""
    path = folder / "check.py"
    path.write_text(f"#!{sys.executable}\nimport sys, time, pathlib\n{body}\n")
    path.chmod(0o755)
    return path


def declare(env: dict[str, str], **profiles: list[str]) -> None:
    config = Path(env["DISPATCH_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    document = {"version": 1, "profiles": {n: {"command": c} for n, c in profiles.items()}}
    (config / "wait-profiles.json").write_text(json.dumps(document))


def submit(env: dict[str, str], *args: str) -> str:
    done = dispatch(env, "submit", "--repo", "acme/web", "--number", "7", *args, "--", "true")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def ended(env: dict[str, str], job_id: str) -> dict:
    wait_state(env, job_id, "completed", "failed", "cancelled")
    return dispatch_json(env, "why", job_id)


def test_a_job_holds_until_its_check_says_go(env, redis_url, prefix, tmp_path) -> None:
    flag, asked = tmp_path / "flag", tmp_path / "asked"
    script = check_script(
        tmp_path,
        f"""
pathlib.Path({str(asked)!r}).write_text(" ".join(sys.argv[1:]))
if pathlib.Path({str(flag)!r}).exists():
    sys.exit(0)
print("PROJ-12 still open")
sys.exit(3)""",
    )
    declare(env, gate=[str(script), "{target}"])
    with daemon(env):
        job_id = submit(env, "--wait-for", "profile=gate")
        said = eventually_sync(lambda: "PROJ-12" in (w := _why(env, job_id)) and w, 20)
        assert "Waiting on `gate` for acme/web#7 since" in said and "1 check" in said
        held = dispatch_json(env, "jobs", "--state", "delayed", "--reason", "wait-*")
        assert [(v["id"], v["reason"]) for v in held] == [(job_id, "wait-hold")]
        assert dispatch_json(env, "jobs", "--reason", "scope-*") == []
        flag.touch()
        appeared = time.monotonic()
        assert wait_state(env, job_id, "completed", "failed", timeout=60) == "completed"
        assert time.monotonic() - appeared < INTERVAL_S * 1.1 + 5  # within one interval
    assert asked.read_text() == "acme/web#7"
    assert not sync_client(redis_url).keys(f"{prefix}:wait:*")  # state and claim gone


def test_a_check_that_answers_never_refuses_the_job(env, tmp_path) -> None:
    script = check_script(tmp_path, 'print("PROJ-12 was closed as won\'t do"); sys.exit(2)')
    declare(env, gate=[str(script)])
    with daemon(env):
        job_id = submit(env, "--wait-for", "profile=gate")
        story = ended(env, job_id)
    assert (story["state"], story["reason"]) == ("failed", "wait-refused")
    assert "won't do" in story["sentence"]
    assert "won't do" in dispatch(env, "why", job_id).stdout
    (run,) = dispatch_json(env, "runs")
    assert (run["reason"], run["outcome"]) == ("wait-refused", "policy")
    assert "wait-refused" in dispatch(env, "runs").stdout


def test_a_second_job_with_the_same_dedup_key_is_superseded(env, redis_url, prefix, tmp_path):
    script = check_script(tmp_path, 'print("not yet"); sys.exit(3)')
    declare(env, gate=[str(script)])
    with daemon(env):
        first = submit(env, "--dedup", "PROJ-12", "--wait-for", "profile=gate")
        eventually_sync(lambda: "1 check" in _why(env, first), 20)
        # the shared queue deduplicates within itself: the sibling comes by this host's queue
        second = submit(env, "--dedup", "PROJ-12", "--queue", "jobs@cli-host",
                        "--wait-for", "profile=gate")  # fmt: skip
        story = ended(env, second)
        assert (story["state"], story["reason"]) == ("failed", "wait-superseded")
        assert first in story["sentence"]
        cancelled = dispatch(env, "cancel", first)
        assert cancelled.returncode == 0, cancelled.stderr
    assert not sync_client(redis_url).exists(f"{prefix}:wait:state:jobs:{first}")


def test_an_undeclared_profile_is_refused_at_once(env) -> None:
    declare(env)
    with daemon(env):
        job_id = submit(env, "--wait-for", "after=+2h", "--wait-for", "profile=typo")
        story = ended(env, job_id)
    assert (story["state"], story["reason"]) == ("failed", "wait-profile-unknown")
    assert "`typo`" in story["sentence"]


def test_bad_wait_for_input_is_refused_by_the_cli(env) -> None:
    for bad in ("after=tomorrow", "jira", "after=2030-01-01T00:00"):
        done = dispatch(env, "submit", "--wait-for", bad, "--", "true")
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert dispatch_json(env, "jobs") == []


def test_two_daemons_never_check_at_once_with_one_fleet_check(redis_url, prefix, tmp_path):
    log = tmp_path / "checks"
    script = check_script(
        tmp_path,
        f"""
with open({str(log)!r}, "a") as f:
    f.write("start\\n"); f.flush(); time.sleep(0.3); f.write("end\\n")
sys.exit(3)""",
    )
    envs = [
        cli_env(redis_url, prefix, tmp_path / host, DISPATCH_HOST=host,
                DISPATCH_WAIT_FLEET_CHECKS="1", DISPATCH_WAIT_CHECK_SLOTS="2", **INTERVAL)
        for host in ("host-a", "host-b")
    ]  # fmt: skip
    for env in envs:
        declare(env, gate=[str(script)])
    with daemon(envs[0]), daemon(envs[1]):
        for _ in range(8):
            submit(envs[0], "--wait-for", "profile=gate")
        eventually_sync(lambda: log.exists() and log.read_text().count("end") >= 12, 90)
    assert all("wait_checked" in daemon_log(e) for e in envs)  # both hosts took checks
    lines = log.read_text().split()
    assert all(a != b for a, b in itertools.pairwise(lines)), lines  # never two starts in a row


def _why(env: dict[str, str], job_id: str) -> str:
    return dispatch(env, "why", job_id).stdout
