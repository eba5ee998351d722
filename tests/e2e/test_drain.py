"""`dispatch drain` on real daemons: a drained host stops claiming, says `draining`, lets its
running job finish (not aborted) and exits 0, and the daemon started after it does not drain;
and a rolling upgrade of three daemons under load, each drained, waited for and started
again in turn, loses no job, runs none twice and spends no attempt."""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from functools import partial
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, state_of, wait_state
from tests.support.polling import eventually_sync

HOSTS = ("r1", "r2", "r3")


def hosts_by_name(env: dict[str, str]) -> dict[str, dict]:
    return {h["name"]: h for h in dispatch_json(env, "hosts")["hosts"]}


def alive(env: dict[str, str], host: str) -> bool:
    return bool(hosts_by_name(env).get(host, {}).get("alive"))


def submit(env: dict[str, str], *command: str) -> str:
    done = dispatch(env, "submit", "--", *command)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_drained_host_finishes_its_job_claims_nothing_and_exits_0(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_HOST="d1")
    go = tmp_path / "go"
    with daemon(env) as first:
        held = submit(env, "sh", "-c", f"while [ ! -e {go} ]; do sleep .05; done")
        wait_state(env, held, "active")
        asked = dispatch(env, "drain", "d1", "--grace", "2m")
        assert asked.returncode == 0 and asked.stdout.startswith("asked d1 to drain")
        eventually_sync(lambda: hosts_by_name(env)["d1"].get("draining") is True, 15)
        assert "draining" in dispatch(env, "status").stdout
        later = submit(env, "true")
        go.touch()
        assert wait_state(env, held, "completed", "failed") == "completed"  # finished, not cut
        assert first.wait(timeout=30) == 0
    assert state_of(env, later) == "waiting"  # the drained host took nothing new
    with daemon(env):  # started after the drain: the request was not for it
        assert wait_state(env, later, "completed") == "completed"
    (record,) = [r for r in dispatch_json(env, "runs") if r["id"] == held]
    assert (record["attempt"], record["outcome"]) == (1, "completed")


def test_drain_of_a_host_that_is_not_running_says_so(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_HOST="d2")
    done = dispatch(env, "drain", "nowhere")
    assert done.returncode == 1 and "not running" in done.stderr
    bad = dispatch(env, "drain", "d2", "--grace", "soon")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_a_rolling_upgrade_of_three_daemons_under_load_loses_and_repeats_nothing(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    envs = {
        h: cli_env(redis_url, prefix, tmp_path / h, DISPATCH_HOST=h, DISPATCH_CONCURRENCY="2")
        for h in HOSTS
    }
    env = envs["r1"]
    submitted: list[str] = []
    feeding = threading.Event()

    def feed() -> None:
        while not feeding.is_set() or len(submitted) < 30:
            submitted.append(submit(env, "sleep", "0.3"))

    with ExitStack() as stack:
        procs = {h: stack.enter_context(daemon(envs[h])) for h in HOSTS}
        feeder = threading.Thread(target=feed)
        feeder.start()
        for h in HOSTS:  # drain, wait for the exit, start the "upgraded" daemon: next host
            eventually_sync(lambda: len(submitted) >= 5, 30)
            eventually_sync(partial(alive, env, h), 30)
            done = dispatch(env, "drain", h, "--grace", "60s", "--wait")
            assert done.returncode == 0 and done.stdout == f"{h} drained: its daemon exited\n"
            assert procs[h].wait(timeout=30) == 0
            procs[h] = stack.enter_context(daemon(envs[h]))
        feeding.set()
        feeder.join(timeout=120)

        def states() -> dict[str, str]:
            return {v["id"]: v["state"] for v in dispatch_json(env, "jobs", "--limit", "1000")}

        eventually_sync(lambda: {states().get(j) for j in submitted} == {"completed"}, 60)
    runs = [r for r in dispatch_json(env, "runs", "--limit", "1000") if r["id"] in submitted]
    assert sorted(r["id"] for r in runs) == sorted(submitted)  # each ran, and once
    assert {(r["attempt"], r["outcome"]) for r in runs} == {(1, "completed")}
    assert len(set(submitted)) == len(submitted) >= 30


def test_a_job_still_running_at_the_end_of_the_grace_is_handed_back_without_an_attempt(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    env = cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_HOST="d3")
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep .05; done"
    doc = {"id": "kept", "command": ["sh", "-c", script], "attempts": 1}
    with daemon(env) as first:
        done = dispatch(env, "submit", "--json", "-", stdin=json.dumps(doc).encode())
        assert done.returncode == 0, done.stderr
        job_id = done.stdout.strip()
        wait_state(env, job_id, "active")
        drained = dispatch(env, "drain", "d3", "--grace", "1s", "--wait")
        assert drained.returncode == 0, drained.stderr
        assert first.wait(timeout=30) == 0
    assert state_of(env, job_id) in ("waiting", "delayed")  # handed back, not failed
    go.touch()
    with daemon(env):  # one attempt allowed: had the drain spent it, this could not run
        assert wait_state(env, job_id, "completed", "failed") == "completed"
