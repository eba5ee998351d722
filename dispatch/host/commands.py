"""Every command the daemon starts on its host: how it is started, what it inherits, how it ends.

A caller names its `Policy` (one per kind of command, all four below) and hands `spawn` the
argv and the environment it built from `policy.inherited()` plus its own additions. Each
command gets no stdin and its stdout on a pipe; the policy says where its stderr goes, whether
it leads a process group of its own (so `kill_group` reaches everything it started), and
whether it dies with the daemon (a parent-death signal armed before exec).

`reap` ends a command whichever way its policy allows (its whole group, else the process
alone) and collects its exit, optionally reading what is left on its stdout for a bounded time
so no pipe transport stays open. `read_capped` reads a reply with a bound, so a command that
prints without end neither fills the daemon's memory nor blocks on a full pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

Stderr = Literal["pipe", "discard", "merge"]
_STDERR = {
    "pipe": asyncio.subprocess.PIPE,
    "discard": asyncio.subprocess.DEVNULL,
    "merge": asyncio.subprocess.STDOUT,
}
_PR_SET_PDEATHSIG = 1
_CHUNK = 65536
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"  # a check's PATH when the daemon has none


@dataclass(frozen=True, slots=True)
class Policy:
    """What one kind of host command inherits from the daemon, and how it is run."""

    name: str
    keeps: tuple[str, ...]  # the daemon's variables it inherits; nothing else of its env
    defaults: Mapping[str, str] = field(default_factory=dict)  # for a variable the daemon lacks
    drop_empty: bool = False  # an empty variable counts as one the daemon lacks
    own_group: bool = True  # a session and process group of its own, killed whole
    die_with_daemon: bool = False  # SIGKILL when the daemon dies (PR_SET_PDEATHSIG)
    stderr: Stderr = "pipe"

    def inherited(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The part of `env` (the daemon's own by default) this command may see."""
        env = os.environ if env is None else env
        kept = {}
        for name in self.keeps:
            value = env.get(name)
            if value is None or (self.drop_empty and not value):
                value = self.defaults.get(name)
            if value is not None:
                kept[name] = value
        return kept


# A wait check: the operator's command judging a job's target. Locale and zone for its
# messages and dates; no Redis URL, no secrets. Its stdout and stderr are its answer.
CHECK = Policy(
    "check",
    keeps=("PATH", "HOME", "LANG", "TZ"),
    defaults={"PATH": DEFAULT_PATH},
    drop_empty=True,
)
# git for the dirty-tree gate: PATH alone; the gate's shadow pins the rest (HOME, GIT_*,
# LC_ALL). It stays in the daemon's group and is killed alone: it starts nothing of its own.
GIT = Policy("git", keeps=("PATH",), defaults={"PATH": os.defpath}, own_group=False)
# A secret resolver: its stdout is the value, its stderr might hold it too and is dropped.
RESOLVER = Policy(
    "resolver",
    keeps=("PATH", "HOME"),
    defaults={"PATH": os.defpath, "HOME": "/"},
    die_with_daemon=True,
    stderr="discard",
)
# A job of the process runner: PATH (or the runner's base env), then the job's own env.
JOB = Policy("job", keeps=("PATH",), defaults={"PATH": ""}, die_with_daemon=True, stderr="merge")
POLICIES = (CHECK, GIT, RESOLVER, JOB)


def die_with_parent(parent: int, prctl: Callable[..., int] | None = None) -> None:
    """In the child, before exec: SIGKILL when the daemon `parent` dies. The signal is armed
    only from here on, so a daemon that died since the fork is caught by the check after.
    `prctl`: libc's, looked up in the parent (`_prctl`); else it is looked up here."""
    prctl = prctl or _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # already an orphan: no run may outlive its daemon
        os.kill(os.getpid(), signal.SIGKILL)


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once in the daemon: in each forked child the lookup (dlopen of
    the process itself) cost about 1 ms of every job's start."""
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


async def spawn(
    argv: list[str], policy: Policy, env: Mapping[str, str], cwd: str | None = None
) -> asyncio.subprocess.Process:
    """Start `argv` (no shell) as `policy` says; OSError when it cannot start."""
    hook = partial(die_with_parent, os.getpid(), _prctl()) if policy.die_with_daemon else None
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=_STDERR[policy.stderr],
        env=dict(env),
        cwd=cwd,
        start_new_session=policy.own_group,
        preexec_fn=hook,
    )


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the whole group a command leads (`own_group`); a no-op once the group is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def reap(
    proc: asyncio.subprocess.Process, policy: Policy, drain_s: float | None = None
) -> None:
    """Kill the command (its whole group, or itself when it has none) and collect its exit.
    With `drain_s`, its stdout is then read to the end for at most that long and closed after,
    should a process outside the group still hold the pipe."""
    if policy.own_group:
        kill_group(proc.pid)
    elif proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()
    if drain_s is None or proc.stdout is None:
        return
    try:
        await asyncio.wait_for(proc.stdout.read(), drain_s)
    except TimeoutError:
        transport = getattr(proc, "_transport", None)  # asyncio offers no public close
        if transport is not None:
            transport.close()


async def read_capped(stream: asyncio.StreamReader, limit: int, drain: bool = True) -> bytes:
    """The stream's first `limit` bytes. With `drain` the rest is read to the end and dropped,
    so the command never blocks on a full pipe; without, reading stops at `limit`."""
    kept = bytearray()
    while (drain or len(kept) < limit) and (chunk := await stream.read(_CHUNK)):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)
