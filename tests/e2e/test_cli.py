"""The command line end to end, as a newcomer would use it: real processes, real Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.support.daemons import (
    SOURCE,
    cli_env,
    daemon,
    dispatch,
    dispatch_json,
    state_of,
    wait_state,
)
from tests.support.polling import eventually_sync
from tests.support.redis_server import free_port


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    return cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_HOST="cli-host")


def test_submit_run_and_read_the_record(env: dict[str, str]) -> None:
    with daemon(env):
        submitted = dispatch(env, "submit", "--", "sh", "-c", "echo hi")
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        assert job_id and "\n" not in job_id
        assert wait_state(env, job_id, "completed", "failed") == "completed"
    runs = dispatch_json(env, "runs")
    assert [(r["id"], r["outcome"], r["exit_code"], r["host"]) for r in runs] == [
        (job_id, "completed", 0, "cli-host")
    ]
    assert Path(runs[0]["output"]).read_text() == "hi\n"
    why = dispatch(env, "why", job_id)
    assert why.returncode == 0 and "completed" in why.stdout
    table = dispatch(env, "runs")
    assert job_id in table.stdout and "completed" in table.stdout


def test_jobs_json_shape_and_why_of_a_delayed_job(env: dict[str, str]) -> None:
    job_id = dispatch(env, "submit", "--after", "+1h", "--", "true").stdout.strip()
    (view,) = dispatch_json(env, "jobs")
    assert {"id", "state", "reason", "until"} <= set(view)
    assert (view["id"], view["state"]) == (job_id, "delayed") and view["until"]
    story = dispatch_json(env, "why", job_id)
    assert story["state"] == "delayed"
    assert "scheduled to start" in dispatch(env, "why", job_id).stdout


def test_cancel_before_start_and_a_second_cancel(env: dict[str, str]) -> None:
    job_id = dispatch(env, "submit", "--after", "+1h", "--", "true").stdout.strip()
    first = dispatch(env, "cancel", job_id)
    assert first.returncode == 0 and "cancelled" in first.stdout
    assert state_of(env, job_id) == "cancelled"
    again = dispatch(env, "cancel", job_id)
    assert again.returncode == 1 and "already finished" in again.stderr
    unknown = dispatch(env, "cancel", "no-such-job")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1


def test_cancel_of_a_running_job_is_taken_by_its_host(env: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with daemon(env):
        job_id = dispatch(
            env, "submit", "--", "sh", "-c", f"touch {marker}; sleep 60"
        ).stdout.strip()
        eventually_sync(marker.exists, 20)
        answer = dispatch(env, "cancel", job_id)
        assert answer.returncode == 0, answer.stderr
        assert "taken by host cli-host" in answer.stdout
        assert wait_state(env, job_id, "cancelled", "completed", "failed") == "cancelled"
    (record,) = dispatch_json(env, "runs")
    assert (record["outcome"], record["reason"]) == ("cancelled", "operator-cancel")


def test_pause_holds_work_durably_and_resume_releases_it(env: dict[str, str]) -> None:
    assert dispatch(env, "pause").returncode == 0
    with daemon(env):
        job_id = dispatch(env, "submit", "--", "true").stdout.strip()
        assert state_of(env, job_id) == "waiting"
    with daemon(env):  # the pause survived the restart
        assert state_of(env, job_id) == "waiting"
        assert dispatch(env, "resume").returncode == 0
        assert wait_state(env, job_id, "completed") == "completed"


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["submit", "--json", "-"], b"{not json"),
        (["submit", "--json", "-"], b'{"id": "x", "attempts": "three"}'),
        (["submit", "--json", "-"], b'{"id": "x", "v": 9}'),
        (["submit", "--json", "-"], b'{"id": "x", "command": ["' + b"a" * 70_000 + b'"]}'),
        (["submit", "--env", "NOEQUALS", "--", "true"], None),
        (["submit", "--after", "yesterday", "--", "true"], None),
        (["submit", "--timeout", "soon", "--", "true"], None),
        (["submit", "--repo", "not a repo", "--", "true"], None),
        (["submit", "--id", "bad id!", "--", "true"], None),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    env: dict[str, str], args: list[str], stdin: bytes | None
) -> None:
    done = dispatch(env, *args, stdin=stdin)
    assert done.returncode == 2, done.stdout
    assert done.stderr.startswith("dispatch: ") and done.stderr.count("\n") == 1
    assert dispatch_json(env, "jobs") == []


def test_bad_usage_exits_2(env: dict[str, str]) -> None:
    assert dispatch(env, "frobnicate").returncode == 2
    assert dispatch(env, "why").returncode == 2


def test_a_json_document_is_accepted_whole(env: dict[str, str]) -> None:
    doc = {"id": "doc-1", "command": ["true"], "attempts": 1, "env": {"A": "b"}}
    done = dispatch(env, "submit", "--json", "-", stdin=json.dumps(doc).encode())
    assert (done.returncode, done.stdout.strip()) == (0, "doc-1")
    duplicate = dispatch(env, "submit", "--json", "-", stdin=json.dumps(doc).encode())
    assert duplicate.returncode == 2 and "already taken" in duplicate.stderr  # input, not a fault


def test_dedup_returns_the_first_id(env: dict[str, str]) -> None:
    first = dispatch(
        env, "submit", "--dedup", "nightly", "--after", "+1h", "--", "true"
    ).stdout.strip()
    second = dispatch(
        env, "submit", "--dedup", "nightly", "--after", "+1h", "--", "true"
    ).stdout.strip()
    assert first == second
    assert len(dispatch_json(env, "jobs")) == 1


def test_a_daemon_killed_mid_job_is_recovered_by_another_exactly_once(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    fast = {
        "DISPATCH_LOCK_MS": "3000",
        "DISPATCH_STOP_GRACE": "0.5s",
        "DISPATCH_RENEW_EVERY": "0.5s",
    }
    env1 = cli_env(redis_url, prefix, tmp_path / "s1", DISPATCH_HOST="h1", **fast)
    env2 = cli_env(redis_url, prefix, tmp_path / "s2", DISPATCH_HOST="h2", **fast)
    script = f"echo start >> {trace}; sleep 2; echo end >> {trace}"
    with daemon(env1) as first:
        job_id = dispatch(env1, "submit", "--", "sh", "-c", script).stdout.strip()
        eventually_sync(lambda: trace.exists() and "start" in trace.read_text(), 20)
        first.send_signal(signal.SIGKILL)
        first.wait()
    with daemon(env2):
        assert wait_state(env2, job_id, "completed", "failed", timeout=40) == "completed"
    assert trace.read_text().split() == ["start", "start", "end"]  # the first run died with h1
    runs = dispatch_json(env2, "runs")
    assert [(r["host"], r["outcome"]) for r in runs] == [("h2", "completed")]


def test_up_starts_and_stops_its_own_redis(prefix: str, tmp_path: Path) -> None:
    env = cli_env(None, prefix, tmp_path / "state")
    sock = tmp_path / "state" / "redis.sock"
    with daemon(env, "up") as up:
        eventually_sync(sock.exists, 20)
        job_id = eventually_sync(
            lambda: (
                (d := dispatch(env, "submit", "--", "echo", "hi")).returncode == 0
                and d.stdout.strip()
            ),
            20,
        )
        assert wait_state(env, job_id, "completed") == "completed"
        # the README's quickstart, on the embedded default
        status = dispatch(env, "status")
        assert status.returncode == 0 and status.stdout.startswith(
            "running: 0 of 3 slots on 1 host"
        )
        followed = dispatch(env, "logs", "-f", job_id)
        assert (followed.returncode, followed.stdout) == (0, "hi\n")
        assert dispatch(env, "logs", job_id).stdout == "hi\n"  # this host's own file
        assert "running: 0 of 3 slots on 1 host" in web_overview(env)
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=40) == 0
    assert (tmp_path / "state" / "redis" / "appendonlydir").is_dir()  # AOF persistence on
    gone = dispatch(env, "jobs")
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1  # its server stopped with it


def web_overview(env: dict[str, str]) -> str:
    """`dispatch web` as the README starts it, on the embedded default: the overview's HTML."""
    port = free_port()
    web = subprocess.Popen(
        [*SOURCE, "web", "--listen", f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL
    )
    try:

        def overview() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as page:
                    return str(page.read().decode())
            except OSError:
                return ""

        return eventually_sync(overview, 20)
    finally:
        web.terminate()
        assert web.wait(timeout=10) == 0
