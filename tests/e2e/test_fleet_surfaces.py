"""Every operator surface of the fleet on one fleet, as an operator meets it: three real daemons
on one Redis with jobs waiting for several reasons (a repo's concurrency limit, a pause window,
an `--after`), one host's queue paused by hand, a host gone quiet and a trigger minting every
2 seconds. `status`, `hosts`, `logs -f` from a machine that runs no daemon, `top` in a real
terminal, `capacity` and each daemon's `/metrics` each tell that same fleet."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch.queue import keys
from tests.support.daemons import SOURCE, cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.metrics import scrape_if_up
from tests.support.polling import eventually_sync
from tests.support.redis_server import free_port, sync_client
from tests.support.tmux import exited, showing, terminal
from tests.support.tmux import keys as press

HOSTS = ("f1", "f2", "f3")
WAITING = {"scope-repo", "pause-window", "scheduled"}


@dataclass
class Fleet:
    envs: list[dict[str, str]]
    ports: list[int]
    outside: dict[str, str]  # a machine that runs no daemon: the CLI and Redis only
    jobs: dict[str, str]
    tmp: Path


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def write(config: Path, name: str, body: dict) -> None:
    (config / name).write_text(json.dumps({"version": 1, **body}))


@pytest.fixture(scope="module")
def fleet(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet")
    prefix = f"fs{int(time.time() * 1000) % 10**9}"
    config = tmp / "config"
    config.mkdir()
    write(config, "scoped-limits.json", {"limits": [{"scope": "acme/web", "concurrent": 1}]})
    window = {"scope": "acme/docs", "start": iso(time.time() - 60), "end": iso(time.time() + 3600)}
    write(config, "pause-windows.json", {"windows": [window]})
    tick = {"id": "tick", "cron": "*/2 * * * * *", "overlap": "allow", "job": {"command": ["true"]}}
    write(config, "triggers.json", {"triggers": [tick]})
    ports = [free_port() for _ in HOSTS]
    # three slots a host: the two jobs that run all along (web1, talker) may land on one host,
    # which must still run the capacity test's job
    envs = [
        cli_env(
            redis_url, prefix, tmp / host, DISPATCH_HOST=host, DISPATCH_CONCURRENCY="3",
            DISPATCH_CONFIG_DIR=str(config), DISPATCH_METRICS_ADDR=f"127.0.0.1:{port}",
            DISPATCH_TRIGGER_EVERY="1s",
        )
        for host, port in zip(HOSTS, ports, strict=True)
    ]  # fmt: skip
    outside = cli_env(
        redis_url, prefix, tmp / "laptop", DISPATCH_HOST="laptop", DISPATCH_CONFIG_DIR=str(config)
    )
    redis = sync_client(redis_url)
    redis.sadd(keys.hosts_registry(prefix), "old-box")  # beat a minute ago, then went quiet
    redis.hset(keys.hosts_seen(prefix), "old-box", int(time.time() * 1000) - 60_000)
    redis.set(keys.queue_keys("jobs@f3", prefix).paused, "1")  # one host's queue, by hand
    with ExitStack() as stack:
        for env in envs:
            stack.enter_context(daemon(env))
        env = envs[0]

        def submit(*args: str, to: dict[str, str] = env) -> str:
            return dispatch(to, "submit", *args).stdout.strip()

        go = tmp / "go"
        jobs = {
            "web1": submit("--repo", "acme/web", "--number", "1", "--", "sleep", "120"),
            "docs": submit("--repo", "acme/docs", "--", "true"),
            "later": submit("--after", "+1h", "--", "true"),
            "held": submit("--queue", "jobs@f3", "--", "true"),
            "talker": submit(
                "--", "sh", "-c", f"echo hello-fleet; while [ ! -e {go} ]; do sleep .05; done;"
                " echo bye-fleet",
            ),
        }  # fmt: skip
        wait_state(env, jobs["web1"], "active")
        jobs["web2"] = submit("--repo", "acme/web", "--number", "2", "--", "true")
        yield Fleet(envs, ports, outside, jobs, tmp)
        go.touch()
        for job in ("web1", "web2"):
            dispatch(env, "cancel", jobs[job])
    redis.close()


def test_status_tells_the_fleet(fleet: Fleet) -> None:
    def settled() -> dict | None:
        found = dispatch_json(fleet.outside, "status")
        live = {h["name"] for h in found["hosts"] if h["alive"]}
        reasons = set(found["reasons"])
        named = {j["id"] for h in found["hosts"] for j in h["jobs"]}
        ready = live == set(HOSTS) and reasons >= WAITING and fleet.jobs["web1"] in named
        return found if ready else None

    found = eventually_sync(settled, 40)
    assert (found["paused"], found["paused_queues"]) == ("partial", ["jobs@f3"])
    [held] = [q for q in found["queues"] if q["name"] == "jobs@f3"]
    assert held["ready"] == 1  # enqueued, never claimed
    [gone] = [h for h in found["hosts"] if h["name"] == "old-box"]
    assert not gone["alive"]
    [tick] = found["triggers"]
    assert (tick["id"], tick["state"], tick["overdue"]) == ("tick", "enabled", False)
    head = dispatch(fleet.outside, "status").stdout.splitlines()[0]
    assert "paused: queues jobs@f3 only" in head and "gone: old-box" in head
    assert "scope-repo" in head and "pause-window" in head

    hosts = dispatch(fleet.outside, "hosts").stdout
    rows = {line.split()[0]: line.split()[1] for line in hosts.split("\n\n")[0].splitlines()[1:]}
    assert rows == {"f1": "live", "f2": "live", "f3": "live", "old-box": "gone"}
    assert fleet.jobs["web1"] in hosts.split("\n\n")[1]  # its running jobs, with their host


def test_logs_follow_a_job_from_a_machine_without_a_daemon(fleet: Fleet) -> None:
    job = fleet.jobs["talker"]
    wait_state(fleet.outside, job, "active")
    out, err = fleet.tmp / "followed", fleet.tmp / "followed.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        follower = subprocess.Popen(
            [*SOURCE, "logs", "-f", job], env=fleet.outside, stdout=o, stderr=e
        )
        try:
            eventually_sync(lambda: b"hello-fleet" in out.read_bytes(), 20)
            (fleet.tmp / "go").touch()
            assert follower.wait(timeout=30) == 0, err.read_text()
        finally:
            if follower.poll() is None:
                follower.kill()
    assert out.read_bytes() == b"hello-fleet\nbye-fleet\n", err.read_text()


def test_top_shows_the_same_fleet_in_a_terminal(fleet: Fleet, tmux: str) -> None:
    env = {**fleet.outside, "TERM": "xterm-256color"}
    with terminal(tmux, env, fleet.tmp, *SOURCE, "top") as tm:
        shown = showing(tm, "gone: old-box", "f1", "f2", "f3", "scope-repo", timeout=30)
        assert "paused: queues jobs@f3 only" in shown
        press(tm, "q")
        assert exited(tm) == 0


def test_capacity_counts_the_runs_of_each_host(fleet: Fleet) -> None:
    for host in ("f1", "f2"):  # each its own run (f3's queue is paused; any host takes `jobs`)
        dispatch(fleet.envs[0], "submit", "--queue", f"jobs@{host}", "--", "true")

    def both_ran() -> dict | None:
        found = dispatch_json(fleet.outside, "capacity", "--since", "1h")
        ran = {h["host"] for h in found["hosts"] if h["runs"]}
        return found if {"f1", "f2"} <= ran else None

    found = eventually_sync(both_ran, 60)
    for host in found["hosts"]:
        assert host["slots"] == 3 and host["peak"] >= 1 and host["wait_p50_s"] is not None
        assert host["memory_limit"] > 0
    assert dispatch(fleet.outside, "capacity").stdout.startswith("capacity over the last 24h")


def test_one_daemon_exports_the_fleet_to_metrics(fleet: Fleet) -> None:
    def led() -> list | None:
        samples = [scrape_if_up(port) for port in fleet.ports]
        leaders = [s for s in samples if s.get(("dispatch_metrics_leader", ())) == 1]
        if len(leaders) != 1 or leaders[0].get(("dispatch_live_hosts", ())) != 3:
            return None
        waiting = {dict(labels)["reason"] for (name, labels) in leaders[0]
                   if name == "dispatch_waiting_jobs"}  # fmt: skip
        return samples if waiting >= WAITING else None  # as of the leader's last round

    samples = eventually_sync(led, 40)
    [leader] = [s for s in samples if s[("dispatch_metrics_leader", ())] == 1]
    assert leader[("dispatch_queue_paused", (("queue", "jobs@f3"),))] == 1
    assert leader[("dispatch_queue_paused", (("queue", "jobs"),))] == 0
    for reason in WAITING:
        assert leader[("dispatch_waiting_jobs", (("reason", reason),))] >= 1
    next_s = leader[("dispatch_trigger_next_timestamp_seconds", (("trigger", "tick"),))]
    assert abs(next_s - time.time()) < 3 * 10  # as of the leader's last round (every 10 s)
    others = [s for s in samples if s is not leader]
    assert all(("dispatch_live_hosts", ()) not in s or s[("dispatch_live_hosts", ())] == 0
               for s in others)  # fmt: skip
