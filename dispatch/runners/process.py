"""The `process` runner: the job's command as a plain subprocess on this host (no isolation).

For development and for hosts without Docker. The child gets its own process group, so an
abort (`ctx.signal`: TERM, then KILL after `ctx.grace_s`) stops everything it started, and a
parent-death signal, so it dies with the daemon. Its output goes to an `OutputFile`: a disk that
fails stops the copy, never the run. The result says how the child ended (its exit
code, or the signal that killed it); the processor decides what that means
(`dispatch.runners.base.classify`).
"""

from __future__ import annotations

import asyncio
import os
import signal

from dispatch.clock import Clock, SystemClock
from dispatch.host.commands import JOB, kill_group, spawn
from dispatch.reasons import (
    ABORTED_BEFORE_START,
    COMMAND_NOT_FOUND,
    NO_COMMAND,
    SIGKILLED,
    STOP_TIMEOUT,
    killed_by,
)
from dispatch.runners.base import (
    USAGE_ENV,
    IsLive,
    RunContext,
    Runner,
    RunResult,
    within_grace,
)
from dispatch.runners.output import OutputFile


class ProcessRunner(Runner):
    def __init__(
        self, base_env: dict[str, str] | None = None, *, clock: Clock | None = None
    ) -> None:
        self.base_env = base_env if base_env is not None else JOB.inherited()
        self.clock: Clock = clock or SystemClock()
        self._groups: dict[str, int] = {}  # job id -> its live run's process group

    def running_as(self, job_id: str) -> str:
        group = self._groups.get(job_id)
        return f"process group {group}" if group is not None else "its process group"

    async def kill_again(self, job_id: str) -> None:
        group = self._groups.get(job_id)
        if group is not None:
            kill_group(group, signal.SIGKILL)

    async def run(self, ctx: RunContext) -> RunResult:
        job = ctx.job
        if not job.command:
            return RunResult(started=False, refusal=NO_COMMAND)
        if not ctx.may_start():  # the spawn below forks before its first await
            return RunResult(started=False, error=ABORTED_BEFORE_START)
        try:
            proc = await spawn(
                job.command,
                JOB,
                {**self.base_env, **ctx.env(), **_usage_env(ctx)},
                cwd=(ctx.folder or job.folder) if job.kind == "local" else None,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            return RunResult(started=False, refusal=COMMAND_NOT_FOUND, error=type(exc).__name__)
        started = self.clock.now_ms()
        out = OutputFile(
            ctx.output_path, ctx.output_cap, job.id, hide=ctx.secrets.values(), tail=ctx.tail
        )
        self._groups[job.id] = proc.pid
        try:
            copier = asyncio.create_task(_copy(proc, out))
            kill, stopped = await _wait_or_abort(proc, ctx)
            await copier
        finally:
            self._groups.pop(job.id, None)
            out.close()
        return RunResult(
            started=True,
            exit_code=proc.returncode,
            kill=kill or _signal_name(proc.returncode),
            stopped=stopped,
            started_ms=started,
            ended_ms=self.clock.now_ms(),
            output=str(ctx.output_path),
            truncated=out.truncated,
            output_lost=out.lost,
        )

    async def reap(self, host: str, is_live: IsLive) -> bool:
        """Nothing to reap: an earlier process's children died with it (parent-death signal)."""
        return True

    async def settle(self) -> None:
        """Nothing runs in the background: each run has ended when `run` returns."""


async def _wait_or_abort(
    proc: asyncio.subprocess.Process, ctx: RunContext
) -> tuple[str | None, bool]:
    """Wait for the exit; on abort, TERM the group, then KILL it after the grace (or at once,
    when the abort is urgent). Returns the kill reason and whether it was stopped at all."""
    waiter = asyncio.ensure_future(proc.wait())
    aborted = asyncio.ensure_future(ctx.aborted.wait())
    await asyncio.wait({waiter, aborted}, return_when=asyncio.FIRST_COMPLETED)
    aborted.cancel()
    if waiter.done() or _exited(proc.pid):  # it ended on its own before the abort came
        await waiter
        return None, False
    kill_group(proc.pid, signal.SIGTERM)
    if await within_grace(ctx, waiter):
        return None, True
    kill_group(proc.pid, signal.SIGKILL)
    await waiter
    return STOP_TIMEOUT, True


def _exited(pid: int) -> bool:
    """Whether the child has exited, though the loop may not have seen it yet: an abort that
    lands in that gap must not make a run that ended on its own a stopped one (it would be
    handed back and run again). Looked at without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already: it has exited
        return True


def _usage_env(ctx: RunContext) -> dict[str, str]:
    """Where the job may report its spend; the job's own env cannot move it."""
    return {} if ctx.usage_file is None else {USAGE_ENV: str(ctx.usage_file)}


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    return SIGKILLED if -returncode == signal.SIGKILL else killed_by(-returncode)


async def _copy(proc: asyncio.subprocess.Process, out: OutputFile) -> None:
    """Copy output while the file takes it, and keep draining after (cap reached, disk failed)
    so the child never blocks on a full pipe."""
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(65536):
        out.write(chunk)
