"""DISPATCH_ON_FAILURE and DISPATCH_WEBHOOK_URL through a real daemon: a job that fails for good
tells the operator's command once, with its record on stdin, and POSTs it once to a local HTTP
server, signed; a completed job tells neither; a command that is not an absolute path is
refused at start in one line."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, wait_state
from tests.support.polling import eventually_sync


def test_a_failed_job_tells_the_operator_once_a_completed_one_never(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    told = tmp_path / "told"
    told.mkdir()
    script = tmp_path / "on-failure"
    script.write_text(f'#!/bin/sh\ncat > "{told}/$$.json"\n')
    script.chmod(0o755)
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
    url = f"http://127.0.0.1:{server.server_address[1]}/jobs"
    env = cli_env(
        redis_url, prefix, tmp_path / "state", DISPATCH_ON_FAILURE=f"{script} --from dispatch",
        DISPATCH_WEBHOOK_URL=url, DISPATCH_WEBHOOK_SECRET="e2e-secret",
    )  # fmt: skip
    with daemon(env):
        ok = dispatch(env, "submit", "--", "true").stdout.strip()
        bad = dispatch(env, "submit", "--attempts", "1", "--", "sh", "-c", "exit 3").stdout.strip()
        assert wait_state(env, ok, "completed") == "completed"
        assert wait_state(env, bad, "failed") == "failed"
        [found] = eventually_sync(lambda: list(told.iterdir()) or None, 15)
        [posted] = eventually_sync(lambda: list(posts) or None, 15)
    server.shutdown()
    server.server_close()
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
