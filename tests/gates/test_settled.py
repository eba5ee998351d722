"""The settled-record gate on a real Redis mirror: which records of a stalled attempt end the
job as recorded, and which let it run again."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.gates.base import ADMIT, Defer, Pickup, Settled
from dispatch.gates.settled import OUTCOME_WAIT_MS, SettledGate
from dispatch.model import Job, RunRecord, encode_job
from dispatch.queue.transitions import Claim
from dispatch.reasons import (
    ABORT_UNCONFIRMED,
    COMPLETED,
    CREATE_FAILED,
    DIRTY_TREE,
    DOCKER_ERROR,
    EXIT_UNKNOWN,
    FAILED,
    INFRA,
    INTERNAL_ERROR,
    JOB_REFUSED,
    JOB_TIMEOUT,
    LEASE_LOST,
    LOCK_LOST,
    OOM,
    OPERATOR_CANCEL,
    OUTCOME_WAIT,
    POLICY,
    SHUTDOWN,
    SIGKILLED,
    exit_code,
    with_error,
)
from dispatch.records.mirror import RunMirror
from tests.support.mirror import stored_by_its_claim

pytestmark = pytest.mark.anyio

JOB = Job(id="j1", command=["true"])
STARTED = "2026-01-01T00:00:00.000Z"
STALLED_CLAIM = "h1:7"  # the claim that ran, then stalled
THIS_CLAIM = "h2:9"  # the pickup after the stall


def pickup(token: str = THIS_CLAIM, stalls: int = 1) -> Pickup:
    return Pickup(Claim("jobs", JOB.id, token, 1, stalls, 0, encode_job(JOB)), JOB)


def record(**fields: Any) -> RunRecord:
    base: dict[str, Any] = {
        "id": JOB.id,
        "attempt": 1,
        "host": "h1",
        "queue": "jobs",
        "started_at": STARTED,
        "claim": STALLED_CLAIM,
    }
    return RunRecord(**{**base, **fields})


@pytest.fixture
def mirror(redis, prefix) -> RunMirror:
    return RunMirror(redis, prefix)


async def decide(mirror: RunMirror, stored: RunRecord, p: Pickup | None = None):
    await stored_by_its_claim(mirror, stored)
    return await SettledGate(mirror).check(p or pickup())


# -- runs that reached their own exit settle --------------------------------------------------

OWN_EXITS = {
    "completed": record(outcome=COMPLETED, exit_code=0),
    "refused by the job": record(outcome=POLICY, reason=JOB_REFUSED, exit_code=2),
    "an exit code of its own": record(outcome=INFRA, reason=exit_code(3), exit_code=3),
}


@pytest.mark.parametrize("kind", OWN_EXITS)
async def test_a_run_that_reached_its_own_exit_settles(mirror, kind: str) -> None:
    assert await decide(mirror, OWN_EXITS[kind]) == Settled(OWN_EXITS[kind])


# -- stopped, failed around the job, or never started: runs again ---------------------------

NOT_ITS_OWN = {
    "lock lost": record(outcome=INFRA, reason=LOCK_LOST, exit_code=143),
    "shutdown": record(outcome=INFRA, reason=SHUTDOWN, exit_code=143),
    "lease lost": record(outcome=INFRA, reason=LEASE_LOST, exit_code=143),
    "timed out": record(outcome=FAILED, reason=JOB_TIMEOUT, exit_code=143),
    "cancelled": record(outcome="cancelled", reason=OPERATOR_CANCEL, exit_code=143),
    "stopped after exit 0": record(outcome=INFRA, reason=LOCK_LOST, exit_code=0),
    "out of memory": record(outcome=INFRA, reason=OOM, exit_code=137, kill=OOM),
    "killed": record(outcome=INFRA, reason=SIGKILLED, exit_code=137, kill=SIGKILLED),
    "engine failed": record(outcome=INFRA, reason=DOCKER_ERROR),
    "exit unknown": record(outcome=INFRA, reason=EXIT_UNKNOWN),
    "would not stop": record(outcome=INFRA, reason=ABORT_UNCONFIRMED),
    "never created": record(outcome=INFRA, reason=with_error(CREATE_FAILED, "no"), started_at=None),
    "refused by a gate": record(outcome=POLICY, reason=DIRTY_TREE, started_at=None),
    "a crash": record(outcome=FAILED, reason=INTERNAL_ERROR, started_at=None),
    "exit 0 never started": record(outcome=COMPLETED, exit_code=0, started_at=None),
}


@pytest.mark.parametrize("kind", NOT_ITS_OWN)
async def test_a_run_that_did_not_reach_its_own_exit_never_settles(mirror, kind: str) -> None:
    """It waits the stall's one beat all the same: the run after it may have reached its exit,
    and its late outcome replaces this record (lua/run_record.lua); then it runs again."""
    assert await decide(mirror, NOT_ITS_OWN[kind]) == Defer(OUTCOME_WAIT_MS, OUTCOME_WAIT)
    assert await SettledGate(mirror).check(pickup()) == ADMIT


# -- only a record an earlier claim wrote ----------------------------------------------------

WRITERS = {  # the record's claim, this pickup's claim, and whether it settles
    "this very claim": (THIS_CLAIM, THIS_CLAIM, False),
    "a later claim": ("h3:12", THIS_CLAIM, False),
    "an earlier claim on another host": (STALLED_CLAIM, THIS_CLAIM, True),
    "an earlier claim on this host": ("h2:8", THIS_CLAIM, True),
    "an earlier claim, by number not text": ("h1:9", "h2:10", True),
    "a later claim, by number not text": ("h1:10", "h2:9", False),
    "a token that names no claim": ("h1:x", THIS_CLAIM, False),
    "a release before records named their claim": ("", THIS_CLAIM, True),
}


@pytest.mark.parametrize("writer", WRITERS)
async def test_only_a_record_an_earlier_claim_wrote_settles(mirror, writer: str) -> None:
    written_by, token, settles = WRITERS[writer]
    stored = record(outcome=COMPLETED, exit_code=0, claim=written_by)
    assert isinstance(await decide(mirror, stored, pickup(token)), Settled) is settles


async def test_a_first_pickup_never_looks(mirror) -> None:
    stored = record(outcome=COMPLETED, exit_code=0)
    assert await decide(mirror, stored, pickup(stalls=0)) == ADMIT


async def test_no_record_waits_one_beat_per_stall_then_admits(mirror) -> None:
    """The stalled claim's daemon may still deliver its run's outcome (cut off from Redis):
    the first look after each stall defers, spending nothing; the next one admits."""
    gate = SettledGate(mirror)
    assert await gate.check(pickup()) == Defer(OUTCOME_WAIT_MS, OUTCOME_WAIT)
    assert await gate.check(pickup()) == ADMIT
    assert await gate.check(pickup(stalls=2)) == Defer(OUTCOME_WAIT_MS, OUTCOME_WAIT)
    assert await gate.check(pickup(stalls=0)) == ADMIT  # a first pickup: nothing can have run


async def test_an_outcome_delivered_during_the_wait_settles_the_next_look(mirror) -> None:
    gate = SettledGate(mirror)
    assert isinstance(await gate.check(pickup()), Defer)
    await stored_by_its_claim(mirror, record(outcome=COMPLETED, exit_code=0))
    assert isinstance(await gate.check(pickup()), Settled)


async def test_a_record_of_another_attempt_is_not_this_ones(mirror) -> None:
    await stored_by_its_claim(mirror, record(outcome=COMPLETED, exit_code=0, attempt=2))
    gate = SettledGate(mirror)
    assert isinstance(await gate.check(pickup()), Defer)  # no record of this attempt yet
    assert await gate.check(pickup()) == ADMIT


async def test_a_stopped_runs_record_waits_for_the_late_outcome_of_the_run_after_it(
    mirror, redis, prefix
) -> None:
    """Attempt 1 was stopped and handed back (its record stays); the run after it completed,
    but its finish landed after a sweep. The re-pickup waits one beat, the late outcome replaces
    the stopped record, and the next look settles: the job does not run a third time. Before,
    the re-pickup admitted at once and the late outcome was refused (the attempt had a record)."""
    await stored_by_its_claim(mirror, record(outcome=INFRA, reason=SHUTDOWN, exit_code=143))
    gate = SettledGate(mirror)
    assert await gate.check(pickup("h3:11")) == Defer(OUTCOME_WAIT_MS, OUTCOME_WAIT)
    late = record(outcome=COMPLETED, exit_code=0, claim="h2:10")
    assert await mirror.put("jobs", late)  # its claim swept, nobody holds the job
    assert await gate.check(pickup("h3:12")) == Settled(late)
