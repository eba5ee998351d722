"""The pickup pipeline: check the head, decode, pass the gates in order, run, and say how the
claim ends. It sequences; each decision lives in a gate, each run in the runner.

Every hold a gate takes is given back in reverse order on every exit (defer, refuse, success,
error, cancellation). A deferral spends no attempt; a refusal is a recorded policy outcome;
only infrastructure failures retry, with exponential backoff.

Faults are not the job's doing, so none fails it or spends its attempt. A Redis fault in any
gate (an error reply such as READONLY, OOM, BUSY, LOADING or MASTERDOWN, a timeout, a lost
connection) defers the job `redis-unavailable`, 2 s doubling to 16 s while pickups keep meeting
faults. A run stopped because its host shut down or a fleet lease lapsed is handed back the
same way (`shutdown`, `lease-lost`). Any other exception is a bug: the worker fails the job
`internal-error` through `crashed`, whose record names only the exception's type (its message
may hold a host path; the log has it all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from redis.exceptions import RedisError

from dispatch.clock import Clock, SystemClock
from dispatch.config.schemas import ConfigSnapshot
from dispatch.errors import InvalidJob, RedisUnavailable
from dispatch.gates.base import (
    ADMIT,
    NEWER_RELEASE_DELAY_MS,
    Admit,
    Decision,
    Defer,
    Gate,
    Pickup,
    Refuse,
    Settled,
    redis_fault_delay_ms,
)
from dispatch.log import event
from dispatch.model import (
    JOB_VERSION,
    DeferRecord,
    Job,
    Result,
    RunRecord,
    Size,
    State,
    decode_job,
    encoder,
    iso,
    peek_version,
)
from dispatch.queue.faults import cause
from dispatch.queue.transitions import Claim
from dispatch.reasons import (
    ABORT_UNCONFIRMED,
    CANCELLED,
    COMPLETED,
    FAILED,
    INFRA,
    INTERNAL_ERROR,
    INVALID_JOB,
    JOB_TIMEOUT,
    LEASE_LOST,
    LOCK_LOST,
    NEWER_RELEASE,
    POLICY,
    REDIS_UNAVAILABLE,
    RETRY,
    SHUTDOWN,
    Outcome,
)
from dispatch.records.mirror import RunMirror
from dispatch.runners.base import AbortSignal, RunContext, Runner, RunResult, classify

SHUTDOWN_DELAY_MS = 1_000
LEASE_LOST_DELAY_MS = 1_500
# aborts that hand the job back (a defer: no attempt spent), and when it is looked at again
_HANDED_BACK = {SHUTDOWN: SHUTDOWN_DELAY_MS, LEASE_LOST: LEASE_LOST_DELAY_MS}
# what a gate's call to Redis can raise: ours (translated at the boundary) and redis-py's own
_REDIS_FAULTS = (RedisUnavailable, RedisError)


@dataclass(frozen=True)
class ProcessorSettings:
    host: str
    output_dir: Path
    stop_grace_s: float = 10.0
    abort_wait_s: float = 30.0
    retry_base_ms: int = 5_000
    retry_max_ms: int = 10 * 60_000


@dataclass
class Ending:
    """How a claim ends: `finish` (payload is the result), `retry` or `defer` (defer record)."""

    action: str
    payload: bytes
    delay_ms: int = 0
    record: RunRecord | None = None
    lingering: asyncio.Task[RunResult] | None = None  # a run that would not stop in time
    mirrored: bool = False  # the record is already in the fleet's copy (RunMirror)


class Processor:
    def __init__(
        self,
        settings: ProcessorSettings,
        runner: Runner,
        gates: Sequence[Gate] = (),
        clock: Clock | None = None,
        config: Callable[[], ConfigSnapshot] | None = None,
        mirror: RunMirror | None = None,
    ) -> None:
        self.s = settings
        self.runner = runner
        self.gates = list(gates)
        self.clock = clock or SystemClock()
        self.config = config or ConfigSnapshot
        self.mirror = mirror
        self._faults_in_a_row = 0  # pickups whose gates met a Redis fault, since one did not

    async def process(self, claim: Claim, signal: AbortSignal) -> Ending:
        version = peek_version(claim.data)
        if version > JOB_VERSION:
            return self._defer(
                claim, Defer(NEWER_RELEASE_DELAY_MS, NEWER_RELEASE, detail=f"v{version}")
            )
        try:
            job = decode_job(claim.data)
        except InvalidJob as exc:
            return self._refuse(claim, None, Refuse(INVALID_JOB, str(exc)))
        pickup = Pickup(claim, job, signal, self.config())
        lingering = None
        try:
            decision = await self._gates(pickup)
            job = pickup.job = _resolved(pickup)  # records name the project the gates found
            if isinstance(decision, Defer):
                return self._defer(claim, decision, job)
            if isinstance(decision, Refuse):
                return self._refuse(claim, job, decision)
            if isinstance(decision, Settled):
                return self._settled(claim, job, decision.record)
            ending = await self._run(pickup)
            lingering = ending.lingering
            return ending
        finally:
            if lingering is None:
                await pickup.release()
            else:  # the container is not gone yet: its folder, slots and budget stay held
                lingering.add_done_callback(lambda _: _spawn(pickup.release()))

    async def _gates(self, pickup: Pickup) -> Decision:
        decision: Decision = ADMIT
        name = ""
        try:
            for gate in self.gates:
                name = gate.name
                decision = await gate.check(pickup)
                if not isinstance(decision, Admit):
                    break
        except _REDIS_FAULTS as exc:  # Redis failed, not the job: give all back, look again
            return self._redis_fault(pickup, name, exc)
        self._faults_in_a_row = 0
        return decision

    def _redis_fault(self, pickup: Pickup, gate: str, exc: Exception) -> Defer:
        self._faults_in_a_row += 1
        delay = redis_fault_delay_ms(self._faults_in_a_row)
        event("gate_redis_fault", job=pickup.claim.id, gate=gate, error=str(exc), delay_ms=delay)
        return Defer(delay, REDIS_UNAVAILABLE, detail=f"{gate} gate: {cause(exc)}")

    async def _run(self, pickup: Pickup) -> Ending:
        claim, job, signal = pickup.claim, pickup.job, pickup.signal
        ctx = RunContext(
            job=job,
            attempt=claim.attempt,
            host=self.s.host,
            fence=claim.token,
            output_path=self.s.output_dir / f"{job.id}.{claim.attempt}.log",
            grace_s=self.s.stop_grace_s,
            signal=signal,
        )
        if signal.event.is_set() and signal.reason == SHUTDOWN:
            return self._defer(claim, Defer(SHUTDOWN_DELAY_MS, SHUTDOWN), job)
        timer = asyncio.get_running_loop().call_later(
            job.timeout_ms / 1000, signal.abort, JOB_TIMEOUT
        )
        try:
            result, lingering = await self._watch(ctx)
        finally:
            timer.cancel()
        ending = self._ending(claim, job, result, signal.reason)
        ending.lingering = lingering
        degraded = pickup.degraded()
        if ending.record is not None and degraded:  # the fleet bound was not checked: say so
            ending.record = msgspec.structs.replace(ending.record, degraded=degraded)
        if ending.record is not None and result.started:
            ending.mirrored = await self._mirror(claim, ending.record)
        return ending

    async def _mirror(self, claim: Claim, record: RunRecord) -> bool:
        """Record the outcome fleet-wide before the claim ends (see the settled gate)."""
        if self.mirror is None:
            return False
        try:
            await self.mirror.put(claim.queue, record, self.clock.now_ms())
        except Exception as exc:  # then the finish carries the record, as without a mirror
            event("run_mirror_failed", job=claim.id, error=str(exc))
            return False
        return True

    def _settled(self, claim: Claim, job: Job, record: RunRecord) -> Ending:
        """End as the recorded run ended, retrying only what a run would have retried."""
        result = RunResult(
            started=record.started_at is not None,
            exit_code=record.exit_code,
        )
        outcome: Outcome = record.outcome
        ending = self._ending_for(claim, job, result, outcome, record.reason, record)
        ending.record = None  # already recorded, locally by the host that ran it
        return ending

    async def _watch(self, ctx: RunContext) -> tuple[RunResult, asyncio.Task[RunResult] | None]:
        """Run; once aborted, wait at most `abort_wait_s` more before giving up on the run."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(self.runner.run(ctx))
        settled: asyncio.Future[None] = loop.create_future()

        def settle(*_: object) -> None:
            if not settled.done():
                settled.set_result(None)

        task.add_done_callback(settle)
        give_up: list[asyncio.TimerHandle] = []
        ctx.signal.when_aborted(
            lambda: give_up.append(loop.call_later(self.s.abort_wait_s, settle))
        )
        try:
            await settled
        finally:
            for handle in give_up:
                handle.cancel()
        if task.done():
            return task.result(), None
        event("run_abort_unconfirmed", job=ctx.job.id, reason=ctx.abort_reason)
        return RunResult(started=True, error=ABORT_UNCONFIRMED), task

    def _ending(self, claim: Claim, job: Job, result: RunResult, abort_reason: str) -> Ending:
        outcome, reason = classify(result, abort_reason)
        record = self._record(claim, job, result, outcome, reason)
        if abort_reason in _HANDED_BACK:  # stopped by a fault around it: no attempt spent
            back = Defer(_HANDED_BACK[abort_reason], abort_reason)
            return self._defer(claim, back, job, record)
        return self._ending_for(claim, job, result, outcome, reason, record)

    def _ending_for(
        self,
        claim: Claim,
        job: Job,
        result: RunResult,
        outcome: Outcome,
        reason: str,
        record: RunRecord,
    ) -> Ending:
        if outcome == INFRA and reason != LOCK_LOST and claim.attempt < job.attempts:
            delay = min(self.s.retry_base_ms * 2 ** (claim.attempt - 1), self.s.retry_max_ms)
            retry = Defer(delay, RETRY, detail=reason)
            return self._defer(claim, retry, job, record, "retry")  # not a reason: the action
        state: State = "completed" if outcome == COMPLETED else "failed"
        if outcome == CANCELLED:
            state = "cancelled"
        res = Result(
            state=state,
            outcome=outcome,
            reason=reason,
            exit_code=result.exit_code,
            host=self.s.host,
            ended_at=iso(self.clock.now_ms()) or "",
        )
        return Ending("finish", encoder.encode(res), record=record)

    def _record(
        self, claim: Claim, job: Job, result: RunResult, outcome: Outcome, reason: str
    ) -> RunRecord:
        ended = result.ended_ms or self.clock.now_ms()
        return RunRecord(
            id=job.id,
            attempt=claim.attempt,
            host=self.s.host,
            queue=claim.queue,
            outcome=outcome,
            reason=reason,
            exit_code=result.exit_code,
            queued_at=iso(claim.queued_ms),
            started_at=iso(result.started_ms),
            ended_at=iso(ended),
            project=job.project,
            target=job.target(),
            size=job.size,
            image=job.image,
            slot_ms=max(ended - result.started_ms, 0) if result.started_ms else 0,
            container=result.container,
            output=result.output,
            kill=result.kill,
            claim=claim.token,
        )

    def _defer(
        self,
        claim: Claim,
        d: Defer,
        job: Job | None = None,
        record: RunRecord | None = None,
        action: str = "defer",
    ) -> Ending:
        now = self.clock.now_ms()
        rec = DeferRecord(
            reason=d.reason,
            until=iso(now + d.delay_ms) or "",
            at=iso(now) or "",
            host=self.s.host,
            project=job.project if job else None,
            holder=d.holder,
            detail=d.detail,
            attempt=claim.attempt,
        )
        event("job_deferred", job=claim.id, reason=d.reason, delay_ms=d.delay_ms)
        return Ending(action, encoder.encode(rec), d.delay_ms, record)

    def _refuse(
        self, claim: Claim, job: Job | None, r: Refuse, outcome: Outcome = POLICY
    ) -> Ending:
        now = self.clock.now_ms()
        event("job_refused", job=claim.id, reason=r.reason, why=r.sentence)
        record = RunRecord(
            id=claim.id,
            attempt=claim.attempt,
            host=self.s.host,
            queue=claim.queue,
            outcome=outcome,
            reason=r.reason,
            sentence=r.sentence,
            queued_at=iso(claim.queued_ms),
            ended_at=iso(now),
            target=job.target() if job else "",
            claim=claim.token,
        )
        res = Result(
            state="failed",
            outcome=outcome,
            reason=r.reason,
            sentence=r.sentence,
            host=self.s.host,
            ended_at=iso(now) or "",
        )
        return Ending("finish", encoder.encode(res), record=record)

    def crashed(self, claim: Claim, exc: BaseException) -> Ending:
        """A bug fails the job for good. The record names the exception's type only: its text
        may hold a host path, and records are read fleet-wide (the worker logs it whole)."""
        return self._refuse(claim, None, Refuse(INTERNAL_ERROR, type(exc).__name__), FAILED)


_background: set[asyncio.Task[None]] = set()


def _spawn(coro: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _background.add(task)
    task.add_done_callback(_background.discard)


def _resolved(pickup: Pickup) -> Job:
    """The job with what the gates resolved: its project and the size the runner applies."""
    job = pickup.job
    changes: dict[str, Any] = {}
    if pickup.project is not None and job.project != pickup.project.id:
        changes["project"] = pickup.project.id
    if pickup.size is not None:
        changes["size"] = Size(memory=str(pickup.size.memory), cpus=pickup.size.cpus)
    return msgspec.structs.replace(job, **changes) if changes else job
