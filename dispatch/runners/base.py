"""The runner seam: how a claimed, admitted job actually runs.

`Runner` is every operation the daemon calls on a runner: `run` one attempt, `reap` at boot
what an earlier process of this host left, `settle` before the loop closes. Assembly chooses
the runner; nothing else asks which one it is.

A run gets a `RunContext` and returns a `RunResult`: what happened (started or not, exit
code, kill, refusal found before starting), never what that means for the job. The processor
maps a result to an outcome with `classify` below, after `run` returns.

A run is not cancelled to stop it: it is aborted through `ctx.signal`. The worker aborts on
`lock-lost`, `operator-cancel` and `shutdown`, a fleet-lease gate on `lease-lost`, the processor
on `job-timeout`. The runner watches the signal and stops the work (SIGTERM, then SIGKILL after
`ctx.grace_s`, or at once when the abort is urgent: `within_grace`), then returns. The
processor waits for that however long it takes, keeping the claim and every hold: a run never
outlives its claim.

Exit codes: 0 completed; 2 a policy refusal by the job itself; anything else, or a kill, an
infrastructure failure (retried while attempts remain). A job that never started spent nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from dispatch.model import Job
from dispatch.reasons import (
    CANCELLED,
    COMPLETED,
    EXIT_UNKNOWN,
    FAILED,
    INFRA,
    JOB_REFUSED,
    JOB_TIMEOUT,
    NOT_STARTED,
    OPERATOR_CANCEL,
    POLICY,
    Outcome,
    exit_code,
)

OUTPUT_CAP_BYTES = 8 * 1024 * 1024
USAGE_ENV = "DISPATCH_USAGE"  # names the file a job reports its spend in (dispatch/budget)
USAGE_FILE = "usage.json"
TRUNCATION_MARK = b"\n[dispatch: output truncated]\n"


class AbortSignal:
    """Set once, with the first reason given; the worker holds it from claim to finish.

    `urgent` cuts the stop grace short: set when the claim is known or presumed lost, so the
    run is killed at once rather than after the grace (another host may already run it)."""

    __slots__ = ("_before_start", "_callbacks", "_event", "_urgent", "is_urgent", "reason")

    def __init__(self) -> None:
        self.reason = ""  # "" until aborted
        self.is_urgent = False
        self._event: asyncio.Event | None = None  # made on first look: most runs never wait
        self._urgent: asyncio.Event | None = None
        self._callbacks: list[Callable[[], object]] | None = None  # made on first use
        self._before_start: Callable[[], object] | None = None

    @property
    def event(self) -> asyncio.Event:
        """Set once aborted."""
        if self._event is None:
            self._event = _event(bool(self.reason))
        return self._event

    @property
    def urgent(self) -> asyncio.Event:
        """Set once the stop must not wait out the grace."""
        if self._urgent is None:
            self._urgent = _event(self.is_urgent)
        return self._urgent

    @property
    def is_set(self) -> bool:
        return bool(self.reason)

    def judged_by(self, judge: Callable[[], object]) -> None:
        """Who looks at the claim once more just before its run starts (the lock keeper)."""
        self._before_start = judge

    def before_start(self) -> None:
        """The last look before a run starts: a daemon that was frozen between its claim and
        here aborts now, rather than at its next renewal tick, after the run began."""
        if self._before_start is not None:
            self._before_start()

    def abort(self, reason: str, *, urgent: bool = False, over: bool = False) -> None:
        """`over` puts this reason in place of an earlier one: the operator's `cancel --kill`
        decides how a run whose stop did not take ends, whatever stopped it first."""
        if urgent and not self.is_urgent:
            self.is_urgent = True
            if self._urgent is not None:
                self._urgent.set()
        if over and self.reason:
            self.reason = reason
        if not self.reason:
            self.reason = reason or "aborted"
            if self._event is not None:
                self._event.set()
            for callback in self._callbacks or ():
                callback()

    def when_aborted(self, callback: Callable[[], object]) -> None:
        """Call back on abort (at once if already aborted): cheaper than a task per job."""
        if self.reason:
            callback()
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)


def _event(already: bool) -> asyncio.Event:
    made = asyncio.Event()
    if already:
        made.set()
    return made


class OutputSink(Protocol):
    """Takes a copy of what a run's output file took, masked (dispatch/records/tail.py)."""

    def feed(self, data: bytes) -> None: ...


@dataclass
class RunContext:
    job: Job
    attempt: int
    host: str
    fence: str
    output_dir: Path
    output_file: str  # the run's output file in `output_dir` (runners/output.py names it)
    grace_s: float = 10.0
    output_cap: int = OUTPUT_CAP_BYTES
    signal: AbortSignal = field(default_factory=AbortSignal)
    usage_dir: Path | None = None  # this run's own writable dir for its usage report
    usage_name: str = USAGE_FILE  # the report's name in it, fresh for each run
    # a local job's folder as the folder gate resolved it and the mutex holds: the one a
    # runner works in (None without gates: the runner resolves `job.folder` itself)
    folder: str | None = None
    tail: OutputSink | None = None  # where the output file's bytes also go (the log tail)

    @property
    def output_path(self) -> Path:
        """Joined only when a runner asks: a no-op run never does, and a join costs microseconds."""
        return self.output_dir / self.output_file

    @output_path.setter
    def output_path(self, path: Path) -> None:
        self.output_dir, self.output_file = path.parent, path.name

    @property
    def usage_file(self) -> Path | None:
        return None if self.usage_dir is None else self.usage_dir / self.usage_name

    # variable -> resolved value of the job's secret references (dispatch.secrets): for the
    # run's environment only, never the recorded Job, never shown (repr=False)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    def env(self) -> dict[str, str]:
        """The run's environment from the job: its plain values and its resolved secrets."""
        return {**self.job.plain_env(), **self.secrets}

    @property
    def aborted(self) -> asyncio.Event:
        return self.signal.event

    @property
    def abort_reason(self) -> str:
        return self.signal.reason

    def abort(self, reason: str) -> None:
        """Ask the runner to stop; the first reason given is the one recorded."""
        self.signal.abort(reason)

    def may_start(self) -> bool:
        """The last look at the claim, called at the point of no return (the spawn, the
        container start) with no await before it: a daemon frozen anywhere earlier on the
        way finds its claim lost here, not at its next renewal tick after the run began."""
        self.signal.before_start()
        return not self.signal.is_set


async def within_grace(ctx: RunContext, stopping: asyncio.Future[Any]) -> bool:
    """Wait for `stopping` up to the stop grace, less if the abort turns urgent; True when it
    finished in time (the caller kills otherwise)."""
    urgent = asyncio.ensure_future(ctx.signal.urgent.wait())
    try:
        await asyncio.wait(
            {stopping, urgent}, timeout=ctx.grace_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        urgent.cancel()
    return stopping.done()


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    started: bool
    exit_code: int | None = None
    kill: str | None = None  # oom | stop-timeout | sigkill | signal-<n>
    stopped: bool = False  # the runner stopped it: an abort reached it before it exited
    error: str = ""  # why it never started, or what went wrong around it
    refusal: str = ""  # a policy reason found before starting (image-missing, ...)
    started_ms: int | None = None
    ended_ms: int | None = None
    container: str | None = None
    output: str | None = None
    truncated: bool = False
    output_lost: bool = False  # the output file could not be written to the end (disk fault)


# (job id, fence) -> whether a live claim owns that run
IsLive = Callable[[str, str], bool]


class Runner(Protocol):
    """Every runner operation the daemon uses; it calls nothing else on a runner."""

    async def run(self, ctx: RunContext) -> RunResult:
        """Run one admitted attempt until it ends or `ctx.signal` aborts it."""
        ...

    async def reap(self, host: str, is_live: IsLive) -> bool:
        """Remove the runs of `host` that no live claim owns (at boot, what an earlier process
        left; later, what a lost claim left behind).

        True only when every such run is known gone; False when the runner could not tell (the
        engine could not be listed) or a leftover could not be removed (logged): then the
        caller must not free `host`'s fleet leases nor hand the claims on, because a slot must
        never be given away while its run may still go on.
        """
        ...

    async def settle(self) -> None:
        """Let background work (such as container removals) finish before the loop closes."""
        ...

    def running_as(self, job_id: str) -> str:
        """What of the job's run an operator would look for on this host (`container NAME`)."""
        return "its run"

    async def kill_again(self, job_id: str) -> None:
        """Send the kill again to a run whose stop has not taken (`dispatch cancel --kill`);
        raises what the engine answered if it refused."""
        return None


def classify(result: RunResult, abort_reason: str) -> tuple[Outcome, str]:
    """Map a run's result to the record's outcome and reason."""
    if abort_reason == OPERATOR_CANCEL:
        return CANCELLED, abort_reason
    if abort_reason == JOB_TIMEOUT:  # would time out again: not retried
        return FAILED, abort_reason
    if result.refusal:
        return POLICY, result.refusal
    if abort_reason:
        return INFRA, abort_reason
    if not result.started:
        return INFRA, result.error or NOT_STARTED
    if result.kill:
        return INFRA, result.kill
    if result.exit_code is None:  # started, then the engine or the process went missing
        return INFRA, result.error or EXIT_UNKNOWN
    if result.exit_code == 0:
        return COMPLETED, ""
    if result.exit_code == 2:
        return POLICY, JOB_REFUSED
    return INFRA, exit_code(result.exit_code)
