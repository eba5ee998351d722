"""`dispatch top` as an operator meets it: a real daemon running a job, and the board in a real
terminal (a tmux session of this test's own server), read back with `capture-pane` until it
shows the host and the job; `l` follows the job's log in the terminal until ^C and Enter bring
the board back, `p` pauses the fleet, `q` quits with exit 0."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemons import SOURCE, cli_env, daemon, dispatch, wait_state
from tests.support.polling import eventually_sync
from tests.support.tmux import exited, keys, screen, showing, terminal


def test_top_shows_the_host_and_its_job_pauses_the_fleet_and_quits(
    redis_url: str, prefix: str, tmp_path: Path, tmux: str
) -> None:
    env = cli_env(
        redis_url, prefix, tmp_path / "h", DISPATCH_HOST="top-host", TERM="xterm-256color"
    )
    with daemon(env):
        ticks = "i=0; while [ $i -lt 300 ]; do echo tick-$i; i=$((i+1)); sleep 0.1; done"
        job_id = dispatch(env, "submit", "--", "sh", "-c", ticks).stdout.strip()
        wait_state(env, job_id, "active")
        with terminal(tmux, env, tmp_path, *SOURCE, "top") as tm:
            # the job is named by the host's next beat (every 5 s)
            shown = showing(tm, "top-host", job_id, timeout=30)
            assert "running: 1 of" in shown and "paused: no" in shown

            keys(tm, "l")  # the running job is selected
            showing(tm, "tick-", timeout=20)
            assert "running: 1 of" not in screen(tm)  # the board gave the terminal over
            keys(tm, "C-c")
            showing(tm, "dispatch logs ended (exit 1); Enter for the board", timeout=10)
            keys(tm, "Enter")
            showing(tm, "running: 1 of", "top-host", timeout=10)

            keys(tm, "p")

            def paused() -> bool:
                return "paused: yes, the whole fleet" in dispatch(env, "status").stdout

            eventually_sync(paused, 20)
            showing(tm, "paused: yes", timeout=10)  # the board's next read

            keys(tm, "q")
            assert exited(tm) == 0, screen(tm)[-300:]
        dispatch(env, "resume")
        dispatch(env, "cancel", job_id)
