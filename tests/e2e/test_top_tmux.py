"""`dispatch top` as an operator meets it: a real daemon running a job, and the board in a real
terminal (a tmux session of this test's own server), read back with `capture-pane` until it
shows the host and the job; `l` follows the job's log in the terminal until ^C and Enter bring
the board back, `p` pauses the fleet, `q` quits with exit 0."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.daemons import SOURCE, cli_env, daemon, dispatch, wait_state
from tests.support.polling import eventually_sync


@pytest.fixture
def tmux() -> str:
    found = shutil.which("tmux")
    if found is None:
        if os.environ.get("CI") == "true":  # scripts/test.sh installs it: missing is a fault
            pytest.fail("tmux is not installed")
        pytest.skip("tmux is not installed (scripts/test.sh installs it)")
    return found


@contextmanager
def terminal(tmux: str, env: dict[str, str], tmp_path: Path, *command: str) -> Iterator[list[str]]:
    """`command` in a 160x50 tmux session on a server of its own; yields the tmux call prefix.
    The pane stays once its process ends, so its exit status can be read."""
    tm = [tmux, "-u", "-S", str(tmp_path / "tmux.sock"), "-f", os.devnull]
    line = shlex.join(command)
    started = [*tm, "new-session", "-d", "-s", "top", "-x", "160", "-y", "50", "-c", os.getcwd()]
    remain = [";", "set-option", "-g", "remain-on-exit", "on"]
    subprocess.run([*started, line, *remain], env=env, check=True, timeout=10)
    try:
        yield tm
    finally:
        subprocess.run([*tm, "kill-server"], capture_output=True, timeout=10)


def screen(tm: list[str]) -> str:
    return subprocess.run(
        [*tm, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True, timeout=10
    ).stdout


def showing(tm: list[str], *wanted: str, timeout: float) -> str:
    """The screen once it shows every one of `wanted`; failing that, the last screen seen."""
    last = ""

    def check() -> str | None:
        nonlocal last
        last = screen(tm)
        return last if all(w in last for w in wanted) else None

    try:
        return eventually_sync(check, timeout)
    except AssertionError:
        raise AssertionError(f"the board never showed {wanted}; it showed:\n{last}") from None


def pane(tm: list[str]) -> str:
    """`dead 0` once the process has exited 0 (`dead s2` if signal 2 ended it), `alive` while
    it runs."""
    signal = "#{?pane_dead_signal,s#{pane_dead_signal},}"
    status = "#{?pane_dead,dead #{pane_dead_status}" + signal + ",alive}"
    got = subprocess.run(
        [*tm, "display-message", "-p", "-t", "top", status],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return got.stdout.strip()


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

            keys = [*tm, "send-keys", "-t", "top"]
            subprocess.run([*keys, "l"], check=True, timeout=10)  # the running job is selected
            showing(tm, "tick-", timeout=20)
            assert "running: 1 of" not in screen(tm)  # the board gave the terminal over
            subprocess.run([*keys, "C-c"], check=True, timeout=10)
            showing(tm, "dispatch logs ended (exit 1); Enter for the board", timeout=10)
            subprocess.run([*keys, "Enter"], check=True, timeout=10)
            showing(tm, "running: 1 of", "top-host", timeout=10)

            subprocess.run([*tm, "send-keys", "-t", "top", "p"], check=True, timeout=10)

            def paused() -> bool:
                return "paused: yes, the whole fleet" in dispatch(env, "status").stdout

            eventually_sync(paused, 20)
            showing(tm, "paused: yes", timeout=10)  # the board's next read

            subprocess.run([*tm, "send-keys", "-t", "top", "q"], check=True, timeout=10)
            ended = eventually_sync(lambda: pane(tm) != "alive" and pane(tm), 20)
            assert ended == "dead 0", ended + "\n" + screen(tm)[-300:]
        dispatch(env, "resume")
        dispatch(env, "cancel", job_id)
