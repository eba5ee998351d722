"""The real daemon under a real notify socket, as systemd runs it with `Type=notify` and
`WatchdogSec=`: READY once it serves, STATUS every beat, WATCHDOG every half period, and
STOPPING when it drains, in that order; its jobs never see the socket."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support.daemons import cli_env, daemon, daemon_log, dispatch, wait_state
from tests.support.notify_socket import listening
from tests.support.polling import eventually_sync


def test_the_daemon_says_ready_status_watchdog_and_stopping_in_order(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "notify"
    env = cli_env(
        redis_url, prefix, tmp_path / "state", DISPATCH_HOST="notified",
        NOTIFY_SOCKET=str(path), WATCHDOG_USEC="1000000",
    )  # fmt: skip
    with listening(path) as heard:
        with daemon(env) as proc:
            eventually_sync(lambda: "READY" in heard.said(), 30)
            assert '"worker_started"' in daemon_log(env)  # READY only once it serves
            job = dispatch(env, "submit", "--", "sh", "-c", 'echo "${NOTIFY_SOCKET:-unset}"')
            job_id = job.stdout.strip()
            assert wait_state(env, job_id, "completed") == "completed"
            eventually_sync(lambda: heard.said().count("WATCHDOG") >= 3, 10)
            eventually_sync(lambda: "STATUS" in heard.said(), 15)  # the next beat's
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=40) == 0
        eventually_sync(lambda: "STOPPING" in heard.said(), 5)
    keys = heard.said()
    ready, stopping = keys.index("READY"), keys.index("STOPPING")
    assert ready < keys.index("STATUS") < stopping and ready < keys.index("WATCHDOG") < stopping
    said = dict(heard.messages[ready][1])
    assert said["STATUS"] == "0/3 slots"
    assert heard.messages[stopping][1]["STATUS"].startswith("draining: ")
    output = dispatch(env, "logs", job_id).stdout
    assert output == "unset\n"  # the socket was the daemon's, never a job's
