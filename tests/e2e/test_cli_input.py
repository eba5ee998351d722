"""Bad input at the command line: one line on stderr, exit 2, nothing written, no traceback.

Each case here was once a traceback, an exit 1, or a job accepted that could only fail later.
Real processes where an operator's shell matters; `main(argv)` in-process for what no shell
can pass (a NUL byte, undecodable bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dispatch.cli import main
from dispatch.queue.keys import queue_keys
from dispatch.reasons import ENV_NAME_RESERVED
from tests.support.daemons import cli_env, dispatch, dispatch_json
from tests.support.redis_server import sync_client


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    return cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_HOST="cli-host")


def refused(done, env: dict[str, str]) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("dispatch: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert dispatch_json(env, "jobs") == []


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "--memory", "0", "--", "true"],  # Docker reads 0 as no limit
        ["submit", "--memory", "5m", "--", "true"],
        ["submit", "--memory", "2t", "--", "true"],
        ["submit", "--cpus", "0", "--", "true"],
        ["submit", "--cpus", "nan", "--", "true"],
        ["submit", "--cpus", "1e400", "--", "true"],
        ["submit", "--attempts", "-1", "--", "true"],
        ["submit", "--attempts", "99999999999999999999", "--", "true"],
        ["submit", "--timeout", "nan", "--", "true"],
        ["submit", "--after", "+inf", "--", "true"],
        ["submit", "--dedup-window", "-1s", "--", "true"],
        ["submit", "--folder", "/tmp", "--queue", "jobs", "--", "true"],  # local on shared queue
        ["submit", "--", "x" * (64 * 1024 + 1)],
        ["submit", "--", *["x" * 60_000] * 20],  # 1.2 MB in all
    ],
)
def test_bad_submit_input(env: dict[str, str], args: list[str]) -> None:
    refused(dispatch(env, *args), env)


@pytest.mark.parametrize(
    ("args", "bound"),
    [
        # a cap under a micro-dollar, the ledgers' unit, was reserved as $0
        (["--max-cost-usd", "0.0000004"], "at least 0.000001"),
        # refused by job_enqueue as a bad call, in the generic line
        (["--after", "2100-01-01T00:00:00Z"], "10 years"),
        # accepted, then refused wait-after-beyond-max at pickup
        (["--wait-for", "after=9999-12-31T00:00:00Z"], "DISPATCH_WAIT_AFTER_MAX (30d)"),
        (["--wait-for", "after=+31d"], "DISPATCH_WAIT_AFTER_MAX (30d)"),
    ],
)
def test_a_value_past_a_bound_is_refused_at_submit_naming_it(
    env: dict[str, str], args: list[str], bound: str
) -> None:
    done = dispatch(env, "submit", *args, "--", "true")
    refused(done, env)
    assert bound in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["--env", "HTTPS_PROXY=http://elsewhere:3128"], "HTTPS_PROXY"),
        (["--env", "MODE=fix", "--env", "no_proxy=*"], "no_proxy"),
        (["--secret", "DISPATCH_USAGE=vault/usage"], "DISPATCH_USAGE"),
    ],
)
def test_an_env_name_the_runner_owns_is_refused_at_submit_naming_it(
    env: dict[str, str], args: list[str], name: str
) -> None:
    done = dispatch(env, "submit", *args, "--", "true")
    refused(done, env)
    assert done.stderr.startswith(f"dispatch: {ENV_NAME_RESERVED}: env {name} "), done.stderr


def test_a_reserved_env_name_in_a_document_is_refused(env: dict[str, str]) -> None:
    doc = {"id": "env-1", "command": ["true"], "env": {"ALL_PROXY": "socks5://x:1080"}}
    done = dispatch(env, "submit", "--json", "-", stdin=json.dumps(doc).encode())
    refused(done, env)
    assert f"{ENV_NAME_RESERVED}: env ALL_PROXY " in done.stderr, done.stderr


def test_a_value_at_a_bound_is_submitted(env: dict[str, str]) -> None:
    for args in (
        ["--max-cost-usd", "0.000001"],
        ["--after", "+3650d"],
        ["--wait-for", "after=+30d"],
    ):
        done = dispatch(env, "submit", *args, "--", "true")
        assert done.returncode == 0, (args, done.stderr)


def test_a_local_document_on_the_shared_queue_is_refused(env: dict[str, str]) -> None:
    doc = {"id": "loc-1", "kind": "local", "folder": "/srv/site", "command": ["true"]}
    refused(dispatch(env, "submit", "--json", "-", stdin=json.dumps(doc).encode()), env)
    doc["command"] = ["echo", "a\0b"]
    doc["queue"] = "jobs@cli-host"
    refused(dispatch(env, "submit", "--json", "-", stdin=json.dumps(doc).encode()), env)


@pytest.mark.parametrize("wait", ["nan", "inf", "-1", "soon", "7200"])
def test_cancel_wait_that_is_not_a_duration_is_refused(env: dict[str, str], wait: str) -> None:
    """Regression: `--wait nan` was a ValueError traceback from int(nan)."""
    job_id = dispatch(env, "submit", "--after", "+1h", "--", "true").stdout.strip()
    done = dispatch(env, "cancel", job_id, "--wait", wait)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert dispatch_json(env, "jobs")[0]["state"] == "delayed"


@pytest.mark.parametrize("args", [["jobs", "--limit", "0"], ["runs", "--limit", "-5"], ["why"]])
def test_usage_errors_are_one_line(env: dict[str, str], args: list[str]) -> None:
    done = dispatch(env, *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr


def test_a_taken_id_exits_2(env: dict[str, str]) -> None:
    assert dispatch(env, "submit", "--id", "same", "--after", "+1h", "--", "true").returncode == 0
    again = dispatch(env, "submit", "--id", "same", "--", "true")
    assert again.returncode == 2 and "already taken" in again.stderr
    assert again.stderr.count("\n") == 1


def test_a_bad_setting_stops_the_daemon_with_one_line(env: dict[str, str]) -> None:
    """Regression: a non-numeric DISPATCH_CONTAINER_PIDS_LIMIT was a traceback at start."""
    env = {**env, "DISPATCH_RUNNER": "docker", "DISPATCH_CONTAINER_PIDS_LIMIT": "lots"}
    for command in ("worker", "jobs"):
        done = dispatch(env, command)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "DISPATCH_CONTAINER_PIDS_LIMIT" in done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:secret@127.0.0.1:port/0",
        "redis://:secret@127.0.0.1:6379/0,,127.0.0.1:7001",
        "unix:///run/redis.sock,127.0.0.1:7001",
        "memcached://:secret@127.0.0.1:11211",
    ],
)
def test_a_bad_redis_url_is_one_line_that_keeps_the_password_out(
    env: dict[str, str], url: str
) -> None:
    for command in ("worker", "status", "doctor"):
        done = dispatch({**env, "DISPATCH_REDIS_URL": url}, command)
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.startswith("dispatch: DISPATCH_REDIS_URL: ")
        assert done.stderr.count("\n") == 1 and "secret" not in done.stderr + done.stdout


def test_a_memory_is_submitted_in_its_shortest_spelling() -> None:
    from dispatch.cli.inputs import memory

    assert [memory(m) for m in ("1.5GiB", "6291456", "1t", None)] == ["1536m", "6m", "1024g", None]


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    code = exited.value.code
    return code if isinstance(code, int) else 1, capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "--", "echo", "a\0b"],  # failed at create as infra, burning attempts
        ["submit", "--env", "A=\0", "--", "true"],
        ["why", "a\udcff"],  # undecodable bytes in argv arrive as lone surrogates
        ["submit", "--image", "busy\udcffbox", "--", "true"],
    ],
)
def test_what_no_shell_can_pass_is_refused_in_process(
    env: dict[str, str], args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, err = run_main(args, capsys)
    assert code == 2 and err.startswith("dispatch: ") and err.count("\n") == 1, err
    assert dispatch_json(env, "jobs") == []


def test_a_record_that_does_not_decode_is_listed_as_unreadable(
    env: dict[str, str], redis_url: str, prefix: str
) -> None:
    """Regression: one undecodable record made the whole `dispatch jobs` a traceback."""
    ids = [dispatch(env, "submit", "--after", "+1h", "--", "true").stdout.strip() for _ in range(3)]
    broken, cancelled, delayed = ids
    for job_id in (broken, cancelled):
        assert dispatch(env, "cancel", job_id).returncode == 0
    k = queue_keys("jobs", prefix)
    with sync_client(redis_url) as r:
        r.hset(k.result, broken, b'{"state": "exploded"')
        r.hset(k.runs, f"{broken}#1", b"\xff not json")
    listing = dispatch(env, "jobs")
    assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
    states = {v["id"]: v["state"] for v in dispatch_json(env, "jobs")}
    assert states == {broken: "unreadable", cancelled: "cancelled", delayed: "delayed"}
    runs = dispatch(env, "runs")
    assert runs.returncode == 0 and "unreadable" in runs.stdout and cancelled in runs.stdout
    rows = dispatch_json(env, "runs")
    assert {(r["id"], r.get("state", r.get("outcome"))) for r in rows} == {
        (f"{broken}#1", "unreadable"),
        (cancelled, "cancelled"),
    }
    why = dispatch(env, "why", broken)
    assert why.returncode == 0 and "cannot be read" in why.stdout
