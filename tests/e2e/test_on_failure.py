"""DISPATCH_ON_FAILURE and DISPATCH_WEBHOOK_URL through a real daemon: a job that fails for good
tells the operator's command once, with its record on stdin, and POSTs it once to a local HTTP
server, signed; a completed job tells neither; a command that is not an absolute path is
refused at start in one line. And across a SIGKILL: a failure its daemon recorded on its own
disk only, then settled by another host, tells once, from the host that settled it."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync
from tests.support.redis_proxy import RedisProxy


def on_failure(tmp_path: Path) -> tuple[Path, Path]:
    """The operator's command, and the folder where it leaves each record it is given (named
    by the host that ran it, from its DISPATCH_HOST)."""
    told = tmp_path / "told"
    told.mkdir()
    script = tmp_path / "on-failure"
    script.write_text(f'#!/bin/sh\ncat > "{told}/$DISPATCH_HOST-$$.json"\n')
    script.chmod(0o755)
    return script, told


@contextmanager
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A local HTTP server for the webhook: its URL, and the bodies POSTed to it."""
    posts: list[bytes] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jobs", posts
    finally:
        server.shutdown()
        server.server_close()


def submit(env: dict[str, str], *args: str) -> str:
    done = dispatch(env, "submit", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_failed_job_tells_the_operator_once_a_completed_one_never(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    script, told = on_failure(tmp_path)
    with receiver() as (url, posts):
        env = cli_env(
            redis_url, prefix, tmp_path / "state", DISPATCH_ON_FAILURE=f"{script} --from dispatch",
            DISPATCH_WEBHOOK_URL=url, DISPATCH_WEBHOOK_SECRET="e2e-secret",
        )  # fmt: skip
        with daemon(env):
            ok = submit(env, "--", "true")
            bad = submit(env, "--attempts", "1", "--", "sh", "-c", "exit 3")
            assert wait_state(env, ok, "completed") == "completed"
            assert wait_state(env, bad, "failed") == "failed"
            [found] = eventually_sync(lambda: list(told.iterdir()) or None, 15)
            [posted] = eventually_sync(lambda: list(posts) or None, 15)
    assert json.loads(posted)["id"] == bad and len(posts) == 1
    said = json.loads(found.read_text())
    (run,) = [r for r in dispatch_json(env, "runs") if r["id"] == bad]
    assert (said["id"], said["outcome"], said["reason"]) == (bad, "infra", "exit-3")
    assert said["claim"] == run["claim"]
    assert len(list(told.iterdir())) == 1  # the completed job told nothing


def test_a_command_that_is_not_an_absolute_path_is_refused_at_start(tmp_path: Path) -> None:
    env = cli_env(None, "p", tmp_path / "state", DISPATCH_ON_FAILURE="notify-me --now")
    done = dispatch(env, "worker")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "DISPATCH_ON_FAILURE" in done.stderr and "absolute path" in done.stderr


def test_a_failure_settled_by_another_host_after_a_sigkill_tells_once(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """h1 runs the job to its failure with Redis away, writes the record to its own run log and
    is killed before Redis has it; restarted, h1's boot puts the record in the fleet's mirror
    and leaves the claim to lapse (the fleet paused meanwhile, so h1 does not take it up
    itself); h2 then finds the stalled claim and the settled gate ends the job as h1's run
    ended. The operator hears of it once, from h2, with h1's record."""
    port = urlsplit(redis_url).port
    if port is None or "," in redis_url:  # a cluster's other nodes would be reached around it
        pytest.skip("the proxy stands for one TCP redis-server")
    script, told = on_failure(tmp_path)
    marker, go = tmp_path / "marker", tmp_path / "go"
    fails = f"echo run >> {marker}; while [ ! -e {go} ]; do sleep 0.05; done; exit 3"
    with ExitStack() as stack:
        proxy = RedisProxy(port).start()  # h1's Redis, to take away while its job ends
        stack.callback(proxy.stop)
        url, posts = stack.enter_context(receiver())
        h1, h2 = (
            cli_env(
                via, prefix, tmp_path / host, DISPATCH_HOST=host, DISPATCH_LOCK_MS="3000",
                DISPATCH_SWEEP_EVERY="0.5s", DISPATCH_ON_FAILURE=str(script),
                DISPATCH_WEBHOOK_URL=url,
            )
            for host, via in (("h1", proxy.url), ("h2", redis_url))
        )  # fmt: skip
        runs_log = tmp_path / "h1" / "runs.jsonl"
        with daemon(h1) as first:
            ok = submit(h1, "--", "true")
            assert wait_state(h1, ok, "completed") == "completed"
            bad = submit(h1, "--attempts", "1", "--", "sh", "-c", fails)
            eventually_sync(marker.exists, 20)
            with proxy.fault("blackhole"):  # the ending cannot leave h1, nor can h1 tell
                go.touch()
                eventually_sync(lambda: runs_log.exists() and bad in runs_log.read_text(), 20)
                first.send_signal(signal.SIGKILL)
                first.wait()
        assert dispatch(h2, "pause").returncode == 0
        with daemon(h1):
            eventually_sync(lambda: "run_recovered_from_log" in daemon_log(h1), 30)
        with daemon(h2):
            assert dispatch(h2, "resume").returncode == 0
            assert wait_state(h2, bad, "completed", "failed", timeout=40) == "failed"
            [found] = eventually_sync(lambda: list(told.iterdir()) or None, 15)
            [posted] = eventually_sync(lambda: list(posts) or None, 15)
            assert "job_settled" in daemon_log(h2)
    assert marker.read_text() == "run\n"  # it ran once, on h1
    assert found.name.startswith("h2-") and len(list(told.iterdir())) == 1
    said = json.loads(found.read_text())
    (run,) = [r for r in dispatch_json(h2, "runs") if r["id"] == bad]
    assert (said["id"], said["host"], said["claim"]) == (bad, "h1", run["claim"])
    assert (said["outcome"], said["reason"]) == ("infra", "exit-3")
    assert len(posts) == 1 and json.loads(posted) == said  # none for the completed job
