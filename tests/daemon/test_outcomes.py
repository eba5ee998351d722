"""The records a claim's end is written down with, built from what is known at the end."""

from __future__ import annotations

from dispatch.daemon import outcomes
from dispatch.gates.base import Defer, Refuse
from dispatch.model import Job, RunRecord, iso
from dispatch.queue.items import Claim
from dispatch.runners.base import RunResult

NOW = 1_700_000_000_000
CLAIM = Claim("jobs", "j1", "h1:7", 2, 3, NOW - 5_000, b"{}")
JOB = Job(id="j1", command=["true"], project="web")


def test_a_result_takes_its_state_from_its_outcome() -> None:
    states = {o: outcomes.finished(o, "", 0, "h1", NOW).state for o in ("completed", "cancelled")}
    assert states == {"completed": "completed", "cancelled": "cancelled"}
    assert outcomes.finished("infra", "exit-1", 1, "h1", NOW).state == "failed"
    assert outcomes.finished("policy", "x", None, "h1", NOW).ended_at == iso(NOW)


def test_a_run_record_ends_when_the_runner_says_else_now() -> None:
    ran = RunResult(started=True, exit_code=0, started_ms=NOW - 900, ended_ms=NOW - 100)
    record = outcomes.run_record(CLAIM, JOB, ran, "completed", "", "h1", NOW)
    assert (record.ended_at, record.slot_ms) == (iso(NOW - 100), 800)
    assert (record.attempt, record.claim, record.project) == (2, "h1:7", "web")
    never = outcomes.run_record(CLAIM, JOB, RunResult(started=False), "infra", "x", "h1", NOW)
    assert (never.ended_at, never.slot_ms, never.started_at) == (iso(NOW), 0, None)


def test_a_defer_record_says_until_when() -> None:
    record = outcomes.defer_record(CLAIM, Defer(2_000, "scope-busy", holder="k"), JOB, "h1", NOW)
    assert (record.at, record.until) == (iso(NOW), iso(NOW + 2_000))
    assert (record.project, record.holder, record.attempt) == ("web", "k", 2)
    assert outcomes.defer_record(CLAIM, Defer(0, "x"), None, "h1", NOW).project is None


def test_a_refusal_fails_the_job_and_records_that_nothing_ran() -> None:
    refusal = Refuse("image-missing", "no image")
    result = outcomes.refused("policy", refusal, "h1", NOW)
    assert (result.state, result.reason, result.sentence) == ("failed", "image-missing", "no image")
    record = outcomes.refusal_record(CLAIM, None, refusal, "policy", "h1", NOW)
    assert (record.started_at, record.target, record.claim) == (None, "", "h1:7")


def test_a_recorded_run_reads_back_as_the_runners_result() -> None:
    record = RunRecord(id="j1", attempt=1, host="h1", queue="jobs", outcome="completed")
    assert outcomes.as_run(record) == RunResult(started=False, exit_code=None)
    cancel = outcomes.cancelled("h1", NOW, 137)
    assert (cancel.state, cancel.reason, cancel.exit_code) == ("cancelled", "operator-cancel", 137)
