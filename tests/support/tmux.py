"""A real terminal for a test: a tmux server of the test's own, a command in a 160x50 pane,
the screen read back with `capture-pane`, keys sent with `send-keys`."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.polling import eventually_sync


def tmux_binary() -> str:
    """tmux, or the test skipped (failed under CI=true: scripts/test.sh installs it)."""
    found = shutil.which("tmux")
    if found is None:
        if os.environ.get("CI") == "true":  # scripts/test.sh installs it: missing is a fault
            pytest.fail("tmux is not installed")
        pytest.skip("tmux is not installed (scripts/test.sh installs it)")
    return found


@dataclass(frozen=True)
class Terminal:
    tm: list[str]  # the tmux call prefix of this terminal's own server
    status: Path  # the command's exit status, once it ended (`exited`)


@contextmanager
def terminal(tmux: str, env: dict[str, str], tmp_path: Path, *command: str) -> Iterator[Terminal]:
    """`command` in a 160x50 tmux session on a server of its own. Its shell writes the exit
    status to a file: tmux itself loses it when the terminal closes before the process is
    reaped (seen on a busy host: the pane dead, no status, for good)."""
    tm = [tmux, "-u", "-S", str(tmp_path / "tmux.sock"), "-f", os.devnull]
    status = tmp_path / "tmux.exit"
    status.unlink(missing_ok=True)
    line = f"{shlex.join(command)}; echo $? > {shlex.quote(str(status))}"
    started = [*tm, "new-session", "-d", "-s", "top", "-x", "160", "-y", "50", "-c", os.getcwd()]
    remain = [";", "set-option", "-g", "remain-on-exit", "on"]
    subprocess.run([*started, line, *remain], env=env, check=True, timeout=10)
    try:
        yield Terminal(tm, status)
    finally:
        subprocess.run([*tm, "kill-server"], capture_output=True, timeout=10)


def screen(term: Terminal) -> str:
    return subprocess.run(
        [*term.tm, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True, timeout=10
    ).stdout


def showing(term: Terminal, *wanted: str, timeout: float) -> str:
    """The screen once it shows every one of `wanted`; failing that, the last screen seen."""
    last = ""

    def check() -> str | None:
        nonlocal last
        last = screen(term)
        return last if all(w in last for w in wanted) else None

    try:
        return eventually_sync(check, timeout)
    except AssertionError:
        raise AssertionError(
            f"the board never showed {wanted}; it showed:\n{last}\n{_pane_state(term)}"
        ) from None


def _pane_state(term: Terminal) -> str:
    """The pane's terminal modes and its processes' signal masks: what decides whether a ^C
    sent to the pane reaches a process (read only when a wait failed)."""
    tty = subprocess.run(
        [*term.tm, "display-message", "-p", "-t", "top", "#{pane_tty}"],
        capture_output=True, text=True, timeout=10,
    ).stdout.strip()  # fmt: skip
    if not tty:
        return "the pane is gone"
    lines = [subprocess.run(["stty", "-a", "-F", tty], capture_output=True, text=True).stdout]
    ps = subprocess.run(["ps", "-o", "pid=", "-t", tty], capture_output=True, text=True).stdout
    for pid in ps.split():
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        sig = [line for line in status if line.startswith(("State", "SigBlk", "SigIgn", "SigCgt"))]
        lines.append(f"{pid} {cmd[:80]} | {' '.join(' '.join(sig).split())}")
    return "\n".join(lines)


def exited(term: Terminal, timeout: float = 20) -> int:
    """The command's exit status, once it has ended."""

    def status() -> str | None:
        text = term.status.read_text() if term.status.exists() else ""
        return text.strip() or None  # written, not only created

    return int(eventually_sync(status, timeout))


def keys(term: Terminal, *sent: str) -> None:
    subprocess.run([*term.tm, "send-keys", "-t", "top", *sent], check=True, timeout=10)
