"""Running a wait profile: the operator's own check command, on the host, for one job.

The command is the profile's argv, never a shell line; the one substitution is `{target}`, the
job's target id (`owner/name#7`, or the folder's path). It runs in a session of its own, with
stdin closed, a scrubbed environment (PATH, HOME, LANG and TZ of the daemon, nothing else: no
Redis URL, no secrets), and the profile's timeout. Its stdout and stderr are read to the end
but kept only up to 4 KiB each; only the first line of what it said is logged and kept.

The exit code is the verdict: 0 go; 3 not yet; 2 never (the condition will not clear); 1, any
other code, a signal, a timeout or a command that would not start: could not tell (a fault).
A check cut short (shutdown, cancel, a lost claim or lease) is `aborted`, which decides
nothing. On a timeout or an abort the whole process group is killed, so a check's own
children never outlive it. The event loop stays free throughout (asyncio subprocesses).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from asyncio import FIRST_COMPLETED
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from dispatch.config.schemas import WaitProfile
from dispatch.host.commands import CHECK, kill_group, read_capped, spawn
from dispatch.host.text import first_line

Verdict = Literal["go", "hold", "never", "fault", "aborted"]
OUTPUT_CAP = 4096
REAP_S = 5.0  # after a kill, how long the pipes may take to close
OUTPUT_GRACE_S = 0.2  # after the check's exit, how long its output may stay open
_BY_CODE: dict[int, Verdict] = {0: "go", 3: "hold", 2: "never"}
# what `dispatch why` calls each verdict
ANSWERS: dict[Verdict, str] = {
    "go": "go",
    "hold": "not yet",
    "never": "never",
    "fault": "could not tell",
    "aborted": "cut short",
}


@dataclass(frozen=True, slots=True)
class Answer:
    verdict: Verdict
    line: str = ""  # the first line of its output, or what went wrong
    exit_code: int | None = None


class Checker(Protocol):
    """What the gate asks a profile through (`ProfileRunner`, or a test's scripted one)."""

    async def check(self, profile: WaitProfile, target: str, abort: asyncio.Event) -> Answer: ...


def scrubbed_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a check inherits (`dispatch.host.commands.CHECK`)."""
    return CHECK.inherited(env)


def argv(profile: WaitProfile, target: str) -> list[str]:
    return [arg.replace("{target}", target) for arg in profile.command]


def command_problem(profile: WaitProfile, env: Mapping[str, str] | None = None) -> str | None:
    """Why the profile's command cannot run here (`dispatch doctor`); None when it can."""
    program = profile.command[0] if profile.command else ""
    if not program:
        return "has no command"
    path = shutil.which(program, path=scrubbed_env(env)["PATH"])
    if path is None:
        exists = os.path.sep in program and os.path.exists(program)
        return f"{program} is not executable" if exists else f"{program} is not found"
    return None


class ProfileRunner:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = scrubbed_env(env)

    async def check(self, profile: WaitProfile, target: str, abort: asyncio.Event) -> Answer:
        try:
            # its own group: killed whole on timeout or abort
            proc = await spawn(argv(profile, target), CHECK, self.env)
        except OSError as exc:
            return Answer("fault", f"could not start: {exc.strerror or type(exc).__name__}")
        try:
            return await self._watch(proc, profile.timeout_ms / 1000, abort)
        finally:
            kill_group(proc.pid)  # a no-op for a group that is gone; cancellation lands here too

    async def _watch(
        self, proc: asyncio.subprocess.Process, timeout_s: float, abort: asyncio.Event
    ) -> Answer:
        done = asyncio.ensure_future(_finish(proc))
        aborted = asyncio.ensure_future(abort.wait())
        try:
            await asyncio.wait([done, aborted], timeout=timeout_s, return_when=FIRST_COMPLETED)
        finally:
            aborted.cancel()
            finished = done.done() and not done.cancelled()
            if not finished:
                kill_group(proc.pid)
                with contextlib.suppress(TimeoutError):  # the pipes close with the group
                    await asyncio.wait_for(done, REAP_S)
        if finished:
            return _answer(*done.result())
        if abort.is_set():
            return Answer("aborted", "cut short")
        return Answer("fault", f"timed out after {timeout_s:g} s")


async def _finish(proc: asyncio.subprocess.Process) -> tuple[int, bytes, bytes]:
    """The check's exit and what it printed. The answer is the exit: a child it left behind
    holding its output is given a moment to let go, then killed with the group."""
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        asyncio.ensure_future(read_capped(stream, OUTPUT_CAP))
        for stream in (proc.stdout, proc.stderr)
    ]
    try:
        code = await proc.wait()
        _, held = await asyncio.wait(readers, timeout=OUTPUT_GRACE_S)
        if held:
            kill_group(proc.pid)  # the pipes close with the group
            await asyncio.wait(held, timeout=REAP_S)
        out, err = (r.result() if r.done() and not r.cancelled() else b"" for r in readers)
        return code, out, err
    finally:
        for reader in readers:
            reader.cancel()


def _answer(code: int, out: bytes, err: bytes) -> Answer:
    verdict = _BY_CODE.get(code, "fault")
    line = first_line(out) or first_line(err)
    if verdict == "fault" and not line:
        line = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    return Answer(verdict, line, code)
