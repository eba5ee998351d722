"""The bench's child processes: a redis-server and `dispatch worker` daemons, each in a session
of its own, each killed when the bench exits (a parent-death SIGKILL, and `children()` kills
what is left on the way out, on Ctrl-C, SIGTERM or an error too)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench.support.redis import free_port, server_argv, wait_for_port

LOCK_MS = 3000
# the benches' daemons: the process runner, and timings short enough that a lapsed lock, a
# renewal and a sweep all come within seconds
DAEMON_ENV = {
    "DISPATCH_RUNNER": "process",
    "DISPATCH_LOCK_MS": str(LOCK_MS),
    "DISPATCH_STOP_GRACE": "0.5s",
    "DISPATCH_RENEW_EVERY": "0.5s",
    "DISPATCH_SWEEP_EVERY": "1s",
    "DISPATCH_CONCURRENCY": "8",
    "DISPATCH_SHUTDOWN_GRACE": "2s",
}
_PR_SET_PDEATHSIG = 1


def _killed_with_bench(bench: int) -> None:
    """In the child, before exec: SIGKILL when the bench dies, however it dies (at once if it
    died before the signal was armed)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != bench:
        os.kill(os.getpid(), signal.SIGKILL)


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A child in its own session (a Ctrl-C reaches the bench alone), output to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=partial(_killed_with_bench, os.getpid()),
        )


@dataclass
class Daemon:
    host: str
    state: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    expected_exit: bool = False  # the bench is killing or stopping it
    pids: list[int] = field(default_factory=list)  # one per start
    module: str = "dispatch"  # run as `python -m <module> worker`

    def start(self) -> None:
        argv = [sys.executable, "-m", self.module, "worker"]
        self.proc = spawn(argv, self.state / "daemon.log", self.env)
        self.pids.append(self.proc.pid)
        self.expected_exit = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def send(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    async def gone(self, timeout_s: float = 30.0) -> bool:
        """Poll until the process is reaped; False if it outlived `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.proc is not None and self.proc.poll() is None:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True


@dataclass
class Children:
    """Every process the bench started, killed on the way out whatever happens."""

    redis: subprocess.Popen[bytes] | None = None
    daemons: list[Daemon] = field(default_factory=list)

    def kill_all(self) -> None:
        procs = [d.proc for d in self.daemons] + [self.redis]
        for proc in procs:
            if proc is not None and proc.poll() is None:
                proc.kill()  # works on a stopped process too
        for proc in procs:
            if proc is not None:
                proc.wait(timeout=10)


@contextlib.contextmanager
def children() -> Iterator[Children]:
    kids = Children()
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield kids
    finally:
        kids.kill_all()
        signal.signal(signal.SIGTERM, previous)


def start_redis(kids: Children, work: Path) -> str:
    """redis-server as the bench's child, its log and working dir in `work`; its URL."""
    port = free_port()
    kids.redis = spawn(server_argv(port, str(work)), work / "redis.log")
    wait_for_port(port)
    return f"redis://127.0.0.1:{port}/0"


def daemon_env(url: str, prefix: str, state: Path, host: str) -> dict[str, str]:
    """The bench's environment without its DISPATCH_ settings, then DAEMON_ENV and this
    daemon's Redis, prefix, host name, state dir and (empty) config dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    env.update(DAEMON_ENV)
    env.update(
        DISPATCH_REDIS_URL=url,
        DISPATCH_PREFIX=prefix,
        DISPATCH_HOST=host,
        DISPATCH_STATE_DIR=str(state),
        DISPATCH_CONFIG_DIR=str(state / "config"),  # empty: never the operator's own
    )
    return env
