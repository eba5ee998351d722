"""Settled-record gate: a job picked up again after its claim stalled may have run to its end
on a daemon that died (or lost its lock) before ending the claim. If the fleet mirror holds the
record of that run, for this very attempt, the job ends as the run ended instead of running
twice.

Only a run that reached its own exit settles: it completed (exit 0), the job refused the work
itself (exit 2, `job-refused`), or it exited with a code of its own (`exit-<n>`, then retried
as the run would have been). A run that was stopped (`lock-lost`, `shutdown`, `lease-lost`,
`job-timeout`, `operator-cancel`, any abort), that failed around the job (`oom`, `sigkill`,
engine errors, `exit-unknown`, `abort-unconfirmed`) or that never started does not: the job
runs again, since nothing the job itself did has ended it.

And only a record an earlier claim wrote. A record names the lock token of its claim
(`<host>:<n>`, n counting the queue's claims); a record with this claim's own token, or a later
one, is not an earlier run's. Records of the same attempt by earlier claims that ended their
claim can only be stopped runs (a finished run ends the job; a retried one spends the attempt),
so the earlier claim whose record settles is one that stalled. A record written before records
named their claim (token "") is judged by what it says alone.

A stall does not always mean the run died: a daemon cut off from Redis past its lock may hold
the outcome of a run that ended, and deliver it as soon as Redis answers, a moment after some
daemon re-claimed the job. So the first pickup after each stall that finds no record that settles
waits one beat (`outcome-wait`, OUTCOME_WAIT_MS, no attempt spent): with the job back in the
delayed set and its lock held by nobody, the late outcome is stored (lua/run_record.lua) and the
next pickup settles on it. A stopped run's record of the same attempt (an earlier claim's,
handed back, then run again) waits the beat too: the late outcome replaces it. After a kill
or a freeze nothing comes, and the job runs a few seconds later.
"""

from __future__ import annotations

from dispatch.gates.base import ADMIT, Decision, Defer, Pickup, Settled
from dispatch.log import event
from dispatch.model import RunRecord
from dispatch.reasons import (
    COMPLETED,
    INFRA,
    JOB_REFUSED,
    OUTCOME_WAIT,
    POLICY,
    delay_ms,
    exit_code,
)
from dispatch.records.mirror import RunMirror

OUTCOME_WAIT_MS = delay_ms(OUTCOME_WAIT)  # declared with the reason, in dispatch/reasons.py


class SettledGate:
    name = "settled"

    def __init__(self, mirror: RunMirror) -> None:
        self.mirror = mirror

    async def check(self, pickup: Pickup) -> Decision:
        claim = pickup.claim
        if claim.stalls == 0:  # first pickup of this attempt: nothing can have run yet
            return ADMIT
        record = await self.mirror.get(claim.queue, f"{claim.id}#{claim.attempt}")
        if record is not None and settles(record, claim.token):
            event("job_settled", job=claim.id, attempt=claim.attempt, outcome=record.outcome)
            return Settled(record)
        # a record that does not settle is an earlier run's that was stopped: the run after
        # it may have reached its exit all the same, and its outcome may be on its way
        if await self.mirror.first_look_since_stall(claim.queue, claim.id, claim.stalls):
            return Defer(OUTCOME_WAIT_MS, OUTCOME_WAIT)
        if record is not None:
            event("settled_record_ignored", job=claim.id, attempt=claim.attempt, why=record.reason)
        return ADMIT


def settles(record: RunRecord, token: str) -> bool:
    """Whether the claim holding `token` must end as `record` says."""
    return _earlier(record.claim, token) and own_exit(record)


def own_exit(record: RunRecord) -> bool:
    """The run reached its own exit: a record that may settle a later pickup."""
    if record.started_at is None:
        return False
    if record.outcome == COMPLETED:
        return True
    if record.outcome == POLICY:
        return record.reason == JOB_REFUSED
    code = record.exit_code
    return record.outcome == INFRA and code is not None and record.reason == exit_code(code)


def _earlier(written_by: str, token: str) -> bool:
    if not written_by:  # from a release before records named their claim
        return True
    theirs, mine = _claim_number(written_by), _claim_number(token)
    return theirs is not None and mine is not None and theirs < mine


def _claim_number(token: str) -> int | None:
    number = token.rpartition(":")[2]
    return int(number) if number.isdigit() else None
