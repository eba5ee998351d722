"""The pickup pipeline: check the head, decode, pass the gates in order, run, and say how the
claim ends. It sequences; each decision lives in a gate, each run in the runner.

Every hold a gate takes is given back in reverse order on every exit (defer, refuse, success,
error, cancellation). A deferral spends no attempt; a refusal is a recorded policy outcome;
only infrastructure failures retry, with exponential backoff. One infrastructure failure is
not the job's and is deferred instead: a run that never started because the engine could not
be reached waits `engine-unavailable`, for a bounded time (`EngineWait`, engine_wait.py).

An operator's cancel ends the job `cancelled` at whatever point it arrives, and spends nothing
more. The worker aborts the claim's signal with `operator-cancel` when it sees the request:
before the run, the processor does not start it; during the run, the runner stops it; and an
ending that would run the job again (a deferral by the gates, a retry after the run) becomes a
cancelled finish. A request the worker has not seen yet is honoured by `job_finish.lua`
itself: every retry or defer carries the result it finishes with instead (`Ending.cancelled`),
and the script uses it when a cancel request stands at that moment, in the same atomic step.
A cancel leaves a run record only when a run started.

Faults are not the job's doing, so none fails it or spends its attempt. A Redis fault in any
gate (an error reply such as READONLY, OOM, BUSY, LOADING or MASTERDOWN, a timeout, a lost
connection) defers the job `redis-unavailable`, 2 s doubling to 16 s while pickups keep meeting
faults. A run stopped because its host shut down or a fleet lease lapsed is handed back the
same way (`shutdown`, `lease-lost`). Any other exception is a bug: the worker fails the job
`internal-error` through `crashed`, whose record names only the exception's type (its message
may hold a host path; the log has it all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from redis.exceptions import RedisError

from dispatch.clock import Clock, SystemClock
from dispatch.config.schemas import ConfigSnapshot
from dispatch.daemon import outcomes
from dispatch.daemon.engine_wait import EngineWait
from dispatch.daemon.timeouts import Timeouts
from dispatch.errors import InvalidJob, RedisUnavailable
from dispatch.fleet.host_budget import HostBudget
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
    active,
    redis_fault_delay_ms,
)
from dispatch.gates.wait.conditions import unreadable_refusal
from dispatch.log import event
from dispatch.model import (
    JOB_VERSION,
    AtStart,
    Job,
    RunRecord,
    Size,
    decode_job,
    encoder,
    iso,
    peek_version,
)
from dispatch.queue.faults import cause
from dispatch.queue.items import MAX_DELAY_MS
from dispatch.queue.transitions import Action, Claim
from dispatch.reasons import (
    DOCKER_UNAVAILABLE,
    FAILED,
    INFRA,
    INTERNAL_ERROR,
    INVALID_JOB,
    LEASE_LOST,
    LOCK_LOST,
    NEWER_RELEASE,
    OPERATOR_CANCEL,
    POLICY,
    REDIS_UNAVAILABLE,
    RETRY,
    SHUTDOWN,
    Outcome,
    delay_ms,
)
from dispatch.records.disk_log import RecordLog
from dispatch.records.disk_log import encode as encode_record
from dispatch.records.mirror import RunMirror
from dispatch.records.tail import Tails
from dispatch.runners.base import (
    AbortSignal,
    RunContext,
    Runner,
    RunResult,
    classify,
)
from dispatch.runners.output import output_name
from dispatch.secrets.around_run import run_with_secrets
from dispatch.spend.charge import Charge, charge
from dispatch.spend.usage_report import NO_REPORT, UsageDirs

# Aborts that are faults, not the job's doing: the claim is handed back as a defer (no attempt
# spent), due after the delay declared with the reason (reasons.py). Its record stays in the
# local log; the finish, fenced, mirrors it only if the claim still holds, so a stale run's
# report is never recorded fleet-wide.
HAND_BACK = {reason: delay_ms(reason) for reason in (SHUTDOWN, LOCK_LOST, LEASE_LOST)}
# what a gate's call to Redis can raise: ours (translated at the boundary) and redis-py's own
_REDIS_FAULTS = (RedisUnavailable, RedisError)


@dataclass(frozen=True)
class ProcessorSettings:
    host: str
    output_dir: Path
    stop_grace_s: float = 10.0
    retry_base_ms: int = 5_000
    retry_max_ms: int = 10 * 60_000
    usage_dir: Path | None = None  # where each run gets a dir for its usage report


class Ending(msgspec.Struct):
    """How a claim ends: `finish` (payload is the result), `retry` or `defer` (defer record)."""

    action: Action
    payload: bytes
    delay_ms: int = 0
    record: RunRecord | None = None
    settled: RunRecord | None = None  # the recorded run a stalled claim ends as: told, not stored
    encoded: bytes = b""  # the record as JSON, encoded once for the run log and the finish
    logged: bool = False  # the record is already in this host's run log
    cancelled: bytes = b""  # retry/defer: the result to finish with if a cancel request stands
    waited: bool = False  # the job has waitFor: its wait state goes once the finish lands


class Processor:
    host_budget: HostBudget | None = None  # the size gate's, once assembled: the beat shows it

    def __init__(
        self,
        settings: ProcessorSettings,
        runner: Runner,
        gates: Sequence[Gate] = (),
        clock: Clock | None = None,
        config: Callable[[], ConfigSnapshot] | None = None,
        mirror: RunMirror | None = None,
        engine_wait: EngineWait | None = None,
        local_log: RecordLog | None = None,
        tails: Tails | None = None,
    ) -> None:
        """Without `engine_wait`, a run the engine never answered is retried as infra. With
        `local_log`, a run's record is on this host's disk before anything else is tried."""
        self.settings = settings
        self.runner = runner
        self.gates = list(gates)
        self.clock = clock or SystemClock()
        empty = ConfigSnapshot()
        self.config = config or (lambda: empty)
        self.mirror = mirror
        self.engine_wait = engine_wait
        self.local_log = local_log
        self.tails = tails  # each run's output tail in Redis (`dispatch logs` from anywhere)
        # the host as a run finds it when admitted, for its record (the worker knows it)
        self.at_start: Callable[[], AtStart | None] = lambda: None
        self._faults_in_a_row = 0  # pickups whose gates met a Redis fault, since one did not
        self._usage = UsageDirs(settings.usage_dir) if settings.usage_dir else None
        self._timeouts = Timeouts()
        self._active: tuple[ConfigSnapshot | None, list[Gate], list[Gate]] = (None, [], [])

    def close(self) -> None:
        if self._usage is not None:
            self._usage.close()

    async def process(self, claim: Claim, signal: AbortSignal) -> Ending:
        ending = await self._process(claim, signal)
        if signal.reason == OPERATOR_CANCEL and ending.action != "finish":
            event("cancel_honoured", job=claim.id, instead_of=ending.action)
            cancelled = ending.cancelled
            return msgspec.structs.replace(
                ending, action="finish", payload=cancelled, delay_ms=0, cancelled=b""
            )
        return ending

    async def _process(self, claim: Claim, signal: AbortSignal) -> Ending:
        try:  # a version this build does not know never decodes: it is told apart below
            job = decode_job(claim.data)
        except InvalidJob as exc:
            return self._unreadable(claim, exc)
        ending = await self._pickup(Pickup(claim, job, signal, self.config()))
        ending.waited = bool(job.wait_for)
        return ending

    def _unreadable(self, claim: Claim, exc: InvalidJob) -> Ending:
        """A newer release's document waits for a host that reads it; any other is refused."""
        version = peek_version(claim.data)
        if version > JOB_VERSION:
            return self._defer(
                claim, Defer(NEWER_RELEASE_DELAY_MS, NEWER_RELEASE, detail=f"v{version}")
            )
        refusal = unreadable_refusal(claim.data) or Refuse(INVALID_JOB, str(exc))
        return self._refuse(claim, None, refusal)

    async def _pickup(self, pickup: Pickup) -> Ending:
        claim, job = pickup.claim, pickup.job
        try:
            decision = await self._gates(pickup) if self.gates else ADMIT
            job = pickup.job = _resolved(pickup)  # records name the project the gates found
            if isinstance(decision, Defer):
                return self._defer(claim, decision, job)
            if isinstance(decision, Refuse):
                return self._refuse(claim, job, decision)
            if isinstance(decision, Settled):
                return self._settled(claim, job, decision.record)
            return await self._run(pickup)
        finally:  # only once the run is gone: its folder, slots and budget stay held till then
            if pickup.holds:
                await pickup.release()

    async def _gates(self, pickup: Pickup) -> Decision:
        decision: Decision = ADMIT
        name = ""
        try:
            for gate in self._gates_for(pickup.config):
                name = gate.name
                decision = await gate.check(pickup)
                if not isinstance(decision, Admit):
                    break
        except _REDIS_FAULTS as exc:  # Redis failed, not the job: give all back, look again
            return self._redis_fault(pickup, name, exc)
        self._faults_in_a_row = 0
        return decision

    def _gates_for(self, config: ConfigSnapshot) -> list[Gate]:
        """The gates this snapshot needs, worked out once per snapshot."""
        seen, of, gates = self._active
        if seen is not config or of is not self.gates:
            gates = active(self.gates, config)
            self._active = (config, self.gates, gates)
        return gates

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
            host=self.settings.host,
            fence=claim.token,
            output_dir=self.settings.output_dir,
            output_file=output_name(job.id, claim.attempt, claim.token),
            grace_s=self.settings.stop_grace_s,
            signal=signal,
            folder=pickup.folder,
        )
        signal.before_start()
        if signal.reason in HAND_BACK:  # aborted in the gates: nothing ran, nothing spent
            return self._defer(claim, Defer(HAND_BACK[signal.reason], signal.reason), job)
        if signal.reason == OPERATOR_CANCEL:  # cancelled in the gates: it never starts
            event("job_cancelled_before_start", job=claim.id)
            return Ending("finish", self._cancel_result())
        self._usage_dir(ctx)
        admitted = (self.clock.now_ms(), self.at_start())
        result = await self._execute(pickup, ctx)
        charged = self._charge(pickup, ctx, result)
        if signal.reason == OPERATOR_CANCEL and not result.started:  # while its secrets resolved
            event("job_cancelled_before_start", job=claim.id)
            return Ending("finish", self._cancel_result())
        held = await self._engine_hold(claim, result, signal.reason)
        if held is not None:
            return self._defer(claim, held, job)  # no record: nothing ran
        ending = self._ending(claim, job, result, signal.reason)
        if ending.record is not None:
            ending.record = _annotated(charged.on(ending.record), pickup, *admitted)
            ending.encoded = encode_record(ending.record)
            if result.started:
                ending.logged = self._log_local(ending.record.id, ending.encoded)
        return ending

    async def _execute(self, pickup: Pickup, ctx: RunContext) -> RunResult:
        """The run itself, under the job's timeout, its output also tailed to Redis."""
        claim, job = pickup.claim, pickup.job
        tail = (
            self.tails.open(claim.queue, job.id, claim.attempt, claim.token) if self.tails else None
        )
        ctx.tail = tail
        ticket = self._timeouts.arm(job.timeout_ms / 1000, pickup.signal)
        result: RunResult | None = None
        try:  # its secrets are resolved inside the timeout, and a cancel stops that too
            # Awaited here, however long a stop takes: the claim and every hold stay until the
            # run is gone (the lock keeper logs a stop that takes too long). Nothing cancels a
            # pickup; a task of its own per run cost more than the rest of a no-op pickup.
            if job.has_secret_refs():
                result = await run_with_secrets(ctx, pickup.config.secrets, self.runner.run)
            else:  # no references to resolve: one coroutine fewer
                result = await self.runner.run(ctx)
            return result
        finally:
            self._timeouts.disarm(ticket, pickup.signal)
            if tail is not None and not tail.close_unfed():  # printed: its end mark goes
                await tail.close(None if result is None else result.exit_code)

    def _usage_dir(self, ctx: RunContext) -> None:
        """On the loop: a few syscalls in the state dir (local, like the run log) cost less
        than the hop to a thread and back."""
        if self._usage is not None:
            ctx.usage_dir = self._usage.take()
            ctx.usage_name = ctx.output_file.removesuffix(".log") + ".json"

    def _charge(self, pickup: Pickup, ctx: RunContext, result: RunResult) -> Charge:
        """Read the run's usage report and settle (or refund) its spend reservation, in the
        background: a Redis fault there never holds up or fails the job's end."""
        report = NO_REPORT
        if self._usage is not None:
            report = self._usage.read_and_return(ctx.usage_dir, ctx.usage_name, ctx.job.id)
        return charge(pickup.spend, report, result.started)

    def _log_local(self, job_id: str, encoded: bytes) -> bool:
        """On this host's disk first: should the daemon die before Redis has the record, its
        successor's boot finds it there and the job ends as it ran, not runs again."""
        if self.local_log is None:
            return False
        try:
            self.local_log.append_soon(encoded)
        except Exception as exc:  # the finish carries the record to Redis all the same
            event("run_log_failed", job=job_id, error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    async def _engine_hold(
        self, claim: Claim, result: RunResult, abort_reason: str
    ) -> Defer | None:
        """A deferral when the run never started only because the engine was unreachable."""
        if self.engine_wait is None or abort_reason or result.started:
            return None
        if result.error != DOCKER_UNAVAILABLE:
            return None
        return await self.engine_wait.hold(claim)

    def _settled(self, claim: Claim, job: Job, record: RunRecord) -> Ending:
        """End as the recorded run ended, retrying only what a run would have retried."""
        result = outcomes.as_run(record)
        outcome: Outcome = record.outcome
        ending = self._ending_for(claim, job, result, outcome, record.reason, record)
        ending.record = None  # already recorded, locally by the host that ran it
        ending.settled = record  # still to tell of, if that host died before it could
        return ending

    def _ending(self, claim: Claim, job: Job, result: RunResult, abort_reason: str) -> Ending:
        if abort_reason in HAND_BACK and ended_on_its_own(result):
            abort_reason = ""  # it exited before the stop reached it: its own outcome stands
        outcome, reason = classify(result, abort_reason)
        now = self.clock.now_ms()
        record = outcomes.run_record(claim, job, result, outcome, reason, self.settings.host, now)
        if abort_reason in HAND_BACK:  # a fault stopped it: back without spending an attempt
            return self._defer(claim, Defer(HAND_BACK[abort_reason], abort_reason), job, record)
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
        if outcome == INFRA and claim.attempt < job.attempts:
            delay = min(
                self.settings.retry_base_ms * 2 ** (claim.attempt - 1), self.settings.retry_max_ms
            )
            retry = Defer(delay, RETRY, detail=reason)
            return self._defer(claim, retry, job, record, "retry")  # not a reason: the action
        res = outcomes.finished(
            outcome, reason, result.exit_code, self.settings.host, self.clock.now_ms()
        )
        return Ending("finish", encoder.encode(res), record=record)

    def _defer(
        self,
        claim: Claim,
        d: Defer,
        job: Job | None = None,
        record: RunRecord | None = None,
        action: Action = "defer",
    ) -> Ending:
        if d.delay_ms > MAX_DELAY_MS:  # looked at again then: a far end never refuses a batch
            d = msgspec.structs.replace(d, delay_ms=MAX_DELAY_MS)
        rec = outcomes.defer_record(claim, d, job, self.settings.host, self.clock.now_ms())
        event("job_deferred", job=claim.id, reason=d.reason, delay_ms=d.delay_ms)
        cancelled = self._cancel_result(record.exit_code if record else None)
        return Ending(action, encoder.encode(rec), d.delay_ms, record, cancelled=cancelled)

    def _cancel_result(self, exit_code: int | None = None) -> bytes:
        return encoder.encode(
            outcomes.cancelled(self.settings.host, self.clock.now_ms(), exit_code)
        )

    def _refuse(
        self, claim: Claim, job: Job | None, r: Refuse, outcome: Outcome = POLICY
    ) -> Ending:
        now = self.clock.now_ms()
        event("job_refused", job=claim.id, reason=r.reason, why=r.sentence)
        record = outcomes.refusal_record(claim, job, r, outcome, self.settings.host, now)
        res = outcomes.refused(outcome, r, self.settings.host, now)
        return Ending("finish", encoder.encode(res), record=record)

    def crashed(self, claim: Claim, exc: BaseException) -> Ending:
        """A bug fails the job for good. The record names the exception's type only: its text
        may hold a host path, and records are read fleet-wide (the worker logs it whole)."""
        return self._refuse(claim, None, Refuse(INTERNAL_ERROR, type(exc).__name__), FAILED)


def ended_on_its_own(result: RunResult) -> bool:
    """The run reached its exit before any stop of ours: what it did is done, whatever
    happened to its claim meanwhile (the finish and the mirror are fenced; a later pickup
    settles on the record instead of running the job again)."""
    return result.started and not result.stopped and result.exit_code is not None


def _resolved(pickup: Pickup) -> Job:
    """The job with what the gates resolved: its project and the size the runner applies."""
    job = pickup.job
    changes: dict[str, Any] = {}
    if pickup.project is not None and job.project != pickup.project.id:
        changes["project"] = pickup.project.id
    if pickup.size is not None:
        changes["size"] = Size(memory=str(pickup.size.memory), cpus=pickup.size.cpus)
    return msgspec.structs.replace(job, **changes) if changes else job


def _annotated(
    record: RunRecord, pickup: Pickup, admitted_ms: int, at_start: AtStart | None
) -> RunRecord:
    """What the pickup knew of the run, in one copy of the record: the fleet leases it held
    without Redis's word (the bound was not checked), when it was admitted and how full the
    host was, and the memory it was given."""
    size = pickup.size
    return msgspec.structs.replace(
        record,
        degraded=pickup.degraded() or record.degraded,
        admitted_at=iso(admitted_ms),
        at_start=at_start,
        memory=size.memory if size is not None else None,
    )
