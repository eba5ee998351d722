"""How a claim's end is written down: every `Result`, `RunRecord` and `DeferRecord` the daemon
makes, built here by pure functions from what is known at the end (the claim, the job, the
run's result, the gate's decision, this host and the instant), so the processor and the upkeep
only decide which one, and a record's shape is read in one place.

  Result       a finished job's final word: `finished` (how its run or its recorded run
               ended), `cancelled` (an operator's cancel), `refused` (a gate's refusal or a
               crash), `stalled` (the sweep's, for a job past `DISPATCH_MAX_STALLS`);
  RunRecord    one attempt's story: `run_record` of a run, `refusal_record` of a refusal
               (and `as_run`, a recorded run read back as the runner's result);
  DeferRecord  why a job waits, and until when: `defer_record`.

Instants are epoch milliseconds read by the caller from its clock; none is read here.
"""

from __future__ import annotations

from dispatch.gates.base import Defer, Refuse
from dispatch.model import DeferRecord, Job, Result, RunRecord, State, iso
from dispatch.queue.items import Claim
from dispatch.reasons import CANCELLED, COMPLETED, INFRA, OPERATOR_CANCEL, STALLED, Outcome
from dispatch.runners.base import RunResult


def finished(
    outcome: Outcome, reason: str, exit_code: int | None, host: str, now_ms: int
) -> Result:
    """The result of a run, or of a recorded one settled on: its state follows its outcome."""
    state: State = "completed" if outcome == COMPLETED else "failed"
    if outcome == CANCELLED:
        state = "cancelled"
    return Result(
        state=state,
        outcome=outcome,
        reason=reason,
        exit_code=exit_code,
        host=host,
        ended_at=iso(now_ms) or "",
    )


def cancelled(host: str, now_ms: int, exit_code: int | None = None) -> Result:
    """An operator's cancel, with the exit code of the run it stopped, if one ran."""
    return Result(
        state="cancelled",
        outcome=CANCELLED,
        reason=OPERATOR_CANCEL,
        exit_code=exit_code,
        host=host,
        ended_at=iso(now_ms) or "",
    )


def refused(outcome: Outcome, refusal: Refuse, host: str, now_ms: int) -> Result:
    """A refusal (a gate's, `policy`) or a crash (`failed`): the job fails for good."""
    return Result(
        state="failed",
        outcome=outcome,
        reason=refusal.reason,
        sentence=refusal.sentence,
        host=host,
        ended_at=iso(now_ms) or "",
    )


def stalled(host: str, now_ms: int) -> Result:
    """What the sweep ends a job with once its claims lapsed `DISPATCH_MAX_STALLS` times."""
    return Result(
        state="failed", outcome=INFRA, reason=STALLED, host=host, ended_at=iso(now_ms) or ""
    )


def run_record(
    claim: Claim,
    job: Job,
    result: RunResult,
    outcome: Outcome,
    reason: str,
    host: str,
    now_ms: int,
) -> RunRecord:
    """A run's record; it ended when the runner says, else now."""
    ended = result.ended_ms or now_ms
    return RunRecord(
        id=job.id,
        attempt=claim.attempt,
        host=host,
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
        output_lost=result.output_lost,
        kill=result.kill,
        claim=claim.token,
    )


def as_run(record: RunRecord) -> RunResult:
    """A recorded run as the runner would have told it, for the settled gate's ending."""
    return RunResult(started=record.started_at is not None, exit_code=record.exit_code)


def refusal_record(
    claim: Claim, job: Job | None, refusal: Refuse, outcome: Outcome, host: str, now_ms: int
) -> RunRecord:
    """The record of a refusal: nothing ran (`job` is None when the document did not decode)."""
    return RunRecord(
        id=claim.id,
        attempt=claim.attempt,
        host=host,
        queue=claim.queue,
        outcome=outcome,
        reason=refusal.reason,
        sentence=refusal.sentence,
        queued_at=iso(claim.queued_ms),
        ended_at=iso(now_ms),
        target=job.target() if job else "",
        claim=claim.token,
    )


def defer_record(
    claim: Claim, defer: Defer, job: Job | None, host: str, now_ms: int
) -> DeferRecord:
    """Why the job waits and until when (`job_finish.lua` keeps `since` across the same reason)."""
    return DeferRecord(
        reason=defer.reason,
        until=iso(now_ms + defer.delay_ms) or "",
        at=iso(now_ms) or "",
        host=host,
        project=job.project if job else None,
        holder=defer.holder,
        detail=defer.detail,
        attempt=claim.attempt,
    )
