"""The processor's release discipline and its settled-record path.

Holds must all be given back, in reverse order, on every exit: defer, refuse, settle, success,
runner error, gate error. The gates here are scripted (pure logic); the real gates run through
the same processor in the daemon tests.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.exceptions import ReadOnlyError

from dispatch.config.schemas import Project
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.fleet.host_budget import JobSize
from dispatch.gates.base import ADMIT, Decision, Defer, Pickup, Refuse, Release
from dispatch.gates.settled import SettledGate
from dispatch.model import DeferRecord, Job, Result, RunRecord, Size, WaitFor, encode_job
from dispatch.queue.items import MAX_DELAY_MS, Finish, NewJob
from dispatch.queue.transitions import Claim, Queue
from dispatch.reasons import (
    CANCELLED,
    DIRTY_TREE,
    INTERNAL_ERROR,
    INVALID_JOB,
    LEASE_LOST,
    LOCK_LOST,
    OPERATOR_CANCEL,
    PAUSE_WINDOW,
    REDIS_UNAVAILABLE,
    SCOPE_FOLDER,
    WAIT_UNREADABLE,
)
from dispatch.records.mirror import RunMirror
from dispatch.runners.base import AbortSignal, RunContext, RunResult
from tests.support.mirror import hold, stored_by_its_claim
from tests.support.pickups import claim_of

pytestmark = pytest.mark.anyio


@dataclass
class Ledger:
    held: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)


@dataclass
class ScriptedGate:
    """Takes `holds` holds (sync or async release), then answers `answer`."""

    name: str
    ledger: Ledger
    holds: int
    answer: str  # admit | defer | refuse | raise

    async def check(self, pickup: Pickup) -> Decision:
        for i in range(self.holds):
            label = f"{self.name}.{i}"
            self.ledger.held.append(label)
            pickup.hold(label, self._release(label, async_=i % 2 == 1))
        if self.answer == "defer":
            return Defer(5_000, "scope-repo")
        if self.answer == "refuse":
            return Refuse("dirty-tree", "uncommitted changes")
        if self.answer == "raise":
            raise RuntimeError("gate bug")
        return ADMIT

    def _release(self, label: str, async_: bool) -> Release:
        def sync() -> None:
            self.ledger.released.append(label)

        async def later() -> None:
            await asyncio.sleep(0)
            self.ledger.released.append(label)

        return later if async_ else sync


class Runner:
    def __init__(self, outcome: str = "ok") -> None:
        self.outcome = outcome
        self.runs = 0

    async def run(self, ctx: RunContext) -> RunResult:
        self.runs += 1
        if self.outcome == "raise":
            raise RuntimeError("runner bug")
        return RunResult(started=True, exit_code=0, started_ms=1, ended_ms=2)


def processor(runner, gates, tmp_path: Path, mirror=None, **settings) -> Processor:
    return Processor(ProcessorSettings("h", tmp_path, **settings), runner, gates, mirror=mirror)


gate_plans = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["admit", "admit", "defer", "refuse", "raise"])),
    min_size=0,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(plan=gate_plans, runner_outcome=st.sampled_from(["ok", "raise"]))
def test_every_hold_is_released_in_reverse_on_every_exit(
    plan: list[tuple[int, str]], runner_outcome: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ledger = Ledger()
    gates = [ScriptedGate(f"g{i}", ledger, n, answer) for i, (n, answer) in enumerate(plan)]
    runner = Runner(runner_outcome)
    proc = processor(runner, gates, tmp_path_factory.mktemp("out"))
    job = Job(id="j1", command=["true"])

    async def go() -> str:
        try:
            return (await proc.process(claim_of(job), AbortSignal())).action
        except RuntimeError:
            return "raised"

    action = asyncio.run(go())
    assert ledger.released == list(reversed(ledger.held))
    stopped_at = next((a for _, a in plan if a != "admit"), None)
    expected = {"defer": "defer", "refuse": "finish", "raise": "raised", None: None}[stopped_at]
    if expected is None:  # every gate admitted: the runner ran
        assert runner.runs == 1
        expected = "raised" if runner_outcome == "raise" else "finish"
    else:
        assert runner.runs == 0
    assert action == expected


async def test_a_stalled_attempt_with_a_mirrored_record_ends_as_recorded(
    redis, prefix, tmp_path: Path
) -> None:
    mirror = RunMirror(redis, prefix)
    job = Job(id="j2", command=["true"])
    recorded = RunRecord(
        id="j2", attempt=1, host="gone", queue="jobs", outcome="completed", exit_code=0,
        started_at="2026-01-01T00:00:00.000Z", claim="gone:0",
    )  # fmt: skip
    await stored_by_its_claim(mirror, recorded)
    runner = Runner()
    proc = processor(runner, [SettledGate(mirror)], tmp_path)
    first_pickup = await proc.process(claim_of(job, stalls=0), AbortSignal())
    assert runner.runs == 1 and first_pickup.action == "finish"
    again = await proc.process(claim_of(job, stalls=1), AbortSignal())
    assert runner.runs == 1  # not run a second time
    result = msgspec.json.decode(again.payload, type=Result)
    assert (again.action, result.outcome, result.exit_code) == ("finish", "completed", 0)
    assert again.record is None and again.settled == recorded  # told of, not stored again


async def test_a_run_record_goes_with_its_finish_encoded_once(tmp_path: Path) -> None:
    ending = await processor(Runner(), [], tmp_path).process(
        claim_of(Job(id="j3", command=["true"])), AbortSignal()
    )
    assert ending.record is not None and ending.record.outcome == "completed"
    assert msgspec.json.decode(ending.encoded, type=RunRecord) == ending.record


async def test_the_processor_writes_nothing_fleet_wide_itself(
    redis, prefix, tmp_path: Path
) -> None:
    """The record reaches Redis with the finish, in the same step and fenced by the claim
    (lua/job_finish.lua): a run that outlived its claim (frozen daemon, swept, the job
    re-claimed elsewhere) has its finish refused, and nothing of it is written."""
    mirror = RunMirror(redis, prefix)
    claim = claim_of(Job(id="j3b", command=["true"]))
    await hold(redis, prefix, claim.queue, claim.id, "other-host:9")
    ending = await processor(Runner(), [], tmp_path, mirror).process(claim, AbortSignal())
    assert ending.record is not None and await mirror.get("jobs", "j3b#1") is None


class Stubborn:
    """A run that ignores its abort until told to stop (a container that will not die)."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def run(self, ctx: RunContext) -> RunResult:
        ctx.signal.abort("operator-cancel")  # cancelled once it runs (before, it would not start)
        await self.gone.wait()
        return RunResult(started=True, exit_code=137, started_ms=1, ended_ms=2, stopped=True)


async def test_holds_stay_until_a_run_that_would_not_stop_is_really_gone(tmp_path: Path) -> None:
    """The pickup does not end (so its claim stays held and renewed) while the run lives."""
    ledger = Ledger()
    runner = Stubborn()
    gates = [ScriptedGate("scope", ledger, 2, "admit")]
    proc = processor(runner, gates, tmp_path, stop_grace_s=0.01)
    signal = AbortSignal()
    pickup = asyncio.create_task(proc.process(claim_of(Job(id="j4", command=["true"])), signal))
    await asyncio.sleep(0.1)  # ten times the stop grace: it would have given up by now
    assert not pickup.done()
    assert ledger.released == []  # the folder and the budget are still in use
    runner.gone.set()
    ending = await asyncio.wait_for(pickup, 5)
    assert ending.action == "finish"
    assert ledger.released == ["scope.1", "scope.0"]


async def test_records_name_the_project_and_size_the_gates_resolved(tmp_path: Path) -> None:
    class Resolver:
        name = "project"

        async def check(self, pickup: Pickup) -> Decision:
            pickup.project = Project(id="acme")
            pickup.size = JobSize(memory=2 * 1024**3, cpus=1.5)
            return ADMIT

    seen: list[Job] = []

    class Seeing(Runner):
        async def run(self, ctx: RunContext) -> RunResult:
            seen.append(ctx.job)
            return await super().run(ctx)

    proc = processor(Seeing(), [Resolver()], tmp_path)
    ending = await proc.process(claim_of(Job(id="j5", command=["true"])), AbortSignal())
    assert ending.record is not None and ending.record.project == "acme"
    (job,) = seen
    assert job.size == Size(memory=str(2 * 1024**3), cpus=1.5)


async def test_a_refusal_keeps_its_sentence_in_the_result_and_the_record(tmp_path: Path) -> None:
    gates = [ScriptedGate("dirty", Ledger(), 0, "refuse")]
    ending = await processor(Runner(), gates, tmp_path).process(
        claim_of(Job(id="j6", command=["true"])), AbortSignal()
    )
    result = msgspec.json.decode(ending.payload, type=Result)
    assert (result.outcome, result.reason, result.sentence) == (
        "policy",
        DIRTY_TREE,
        "uncommitted changes",
    )
    assert ending.record is not None
    assert (ending.record.reason, ending.record.sentence) == (DIRTY_TREE, "uncommitted changes")


class HeldGate:
    """Takes a hold, then decides only when the test lets it: a cancel lands in between."""

    name = "held"

    def __init__(self, ledger: Ledger, answer: Decision) -> None:
        self.ledger = ledger
        self.answer = answer
        self.entered = asyncio.Event()
        self.go_on = asyncio.Event()

    async def check(self, pickup: Pickup) -> Decision:
        self.ledger.held.append("held")
        pickup.hold("held", lambda: self.ledger.released.append("held"))
        self.entered.set()
        await self.go_on.wait()
        return self.answer


def cancelled_result(ending) -> Result:
    assert ending.action == "finish"
    return msgspec.json.decode(ending.payload, type=Result)


@pytest.mark.parametrize("answer", [Defer(5_000, SCOPE_FOLDER), ADMIT], ids=["defer", "admit"])
async def test_a_cancel_while_the_gates_decide_ends_the_job_before_it_runs(
    tmp_path: Path, answer: Decision
) -> None:
    ledger, runner, signal = Ledger(), Runner(), AbortSignal()
    gate = HeldGate(ledger, answer)
    proc = processor(runner, [gate], tmp_path)
    task = asyncio.create_task(proc.process(claim_of(Job(id="j7", command=["true"])), signal))
    await gate.entered.wait()
    signal.abort(OPERATOR_CANCEL)  # what the worker does when it takes the request
    gate.go_on.set()
    ending = await task
    result = cancelled_result(ending)
    assert (result.state, result.outcome, result.reason) == (
        "cancelled",
        CANCELLED,
        OPERATOR_CANCEL,
    )
    assert runner.runs == 0 and ending.record is None  # no run, so no run record
    assert ledger.released == ["held"]


class FailingRunner(Runner):
    async def run(self, ctx: RunContext) -> RunResult:
        self.runs += 1
        return RunResult(started=True, exit_code=1, started_ms=1, ended_ms=2)


class CancelledAsItEnds(FailingRunner):
    """The cancel request is taken after the run ended on its own, before its ending is out."""

    async def run(self, ctx: RunContext) -> RunResult:
        result = await super().run(ctx)
        ctx.signal.abort(OPERATOR_CANCEL)
        return result


async def test_a_cancel_taken_as_a_failing_run_ends_finishes_it_cancelled(
    tmp_path: Path,
) -> None:
    runner, signal = CancelledAsItEnds(), AbortSignal()
    claim = claim_of(Job(id="j8", command=["false"]))
    ending = await processor(runner, [], tmp_path).process(claim, signal)
    result = cancelled_result(ending)
    assert (result.state, result.reason, result.exit_code) == ("cancelled", OPERATOR_CANCEL, 1)
    assert runner.runs == 1 and ending.delay_ms == 0
    assert ending.record is not None and ending.record.outcome == CANCELLED  # not retried


async def test_every_retry_and_defer_carries_the_result_a_cancel_would_finish_it_with(
    tmp_path: Path,
) -> None:
    retry = await processor(FailingRunner(), [], tmp_path).process(
        claim_of(Job(id="j9", command=["false"])), AbortSignal()
    )
    gates = [ScriptedGate("scope", Ledger(), 0, "defer")]
    defer = await processor(Runner(), gates, tmp_path).process(
        claim_of(Job(id="j10", command=["true"])), AbortSignal()
    )
    for ending, exit_code in ((retry, 1), (defer, None)):
        assert ending.action in ("retry", "defer")
        result = msgspec.json.decode(ending.cancelled, type=Result)
        assert (result.state, result.reason, result.exit_code) == (
            "cancelled",
            OPERATOR_CANCEL,
            exit_code,
        )


async def test_a_crash_records_the_type_of_the_error_and_nothing_of_its_text(tmp_path: Path):
    proc = processor(Runner(), [], tmp_path)
    claim = claim_of(Job(id="j7", command=["true"]))
    ending = proc.crashed(claim, FileNotFoundError("/home/operator/secret-project/x"))
    result = msgspec.json.decode(ending.payload, type=Result)
    assert (result.state, result.reason, result.sentence) == (
        "failed",
        INTERNAL_ERROR,
        "FileNotFoundError",
    )
    assert ending.record is not None and ending.record.sentence == "FileNotFoundError"


async def test_a_redis_error_in_a_gate_defers_and_gives_every_hold_back(tmp_path: Path) -> None:
    ledger = Ledger()

    class Failing(ScriptedGate):
        async def check(self, pickup: Pickup) -> Decision:
            await super().check(pickup)
            raise ReadOnlyError("You can't write against a read only replica.")

    gates = [ScriptedGate("first", ledger, 2, "admit"), Failing("scope", ledger, 1, "admit")]
    ending = await processor(Runner(), gates, tmp_path).process(
        claim_of(Job(id="j8", command=["true"])), AbortSignal()
    )
    deferred = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert (ending.action, deferred.reason, deferred.detail) == (
        "defer",
        REDIS_UNAVAILABLE,
        "scope gate: ReadOnlyError",
    )
    assert ledger.released == list(reversed(ledger.held))


class Stopped:
    """A run that notices its abort at once and exits as a stopped process does."""

    async def run(self, ctx: RunContext) -> RunResult:
        ctx.signal.abort(LEASE_LOST)  # the lease lapses while the run is on
        await ctx.aborted.wait()
        return RunResult(started=True, exit_code=143, started_ms=1, ended_ms=2, stopped=True)


async def test_a_run_stopped_by_a_lost_lease_is_handed_back_without_an_attempt(tmp_path: Path):
    signal = AbortSignal()
    claim = claim_of(Job(id="j9", command=["true"]))
    ending = await processor(Stopped(), [], tmp_path).process(claim, signal)
    deferred = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert (ending.action, deferred.reason) == ("defer", LEASE_LOST)  # a defer spends none
    assert ending.record is not None and ending.record.reason == LEASE_LOST


async def test_a_record_names_the_claim_that_wrote_it(tmp_path: Path) -> None:
    claim = claim_of(Job(id="j10", command=["true"]))
    ending = await processor(Runner(), [], tmp_path).process(claim, AbortSignal())
    assert ending.record is not None and ending.record.claim == claim.token


async def test_a_stalled_attempt_whose_record_is_of_a_stopped_run_runs_again(
    redis, prefix, tmp_path: Path
) -> None:
    mirror = RunMirror(redis, prefix)
    job = Job(id="j11", command=["true"], attempts=1)
    stopped = RunRecord(
        id="j11", attempt=1, host="gone", queue="jobs", outcome="infra", reason=LOCK_LOST,
        exit_code=143, started_at="2026-01-01T00:00:00.000Z", claim="gone:1",
    )  # fmt: skip
    await stored_by_its_claim(mirror, stopped)
    runner = Runner()
    stalled = Claim("jobs", job.id, "h:2", 1, 1, 0, encode_job(job))
    gated = processor(runner, [SettledGate(mirror)], tmp_path)
    waited = await gated.process(stalled, AbortSignal())  # the beat for a late outcome
    assert waited.action == "defer" and runner.runs == 0
    ending = await gated.process(stalled, AbortSignal())
    result = msgspec.json.decode(ending.payload, type=Result)
    assert runner.runs == 1 and (result.outcome, result.exit_code) == ("completed", 0)


async def test_a_claim_judged_lost_just_before_the_run_never_starts(tmp_path: Path) -> None:
    """A daemon frozen between its claim and the run's start: the lock keeper's last look,
    just before the start, hands the job back instead of running it without a live claim."""
    runner, signal = Runner(), AbortSignal()
    signal.judged_by(lambda: signal.abort(LOCK_LOST, urgent=True))
    ending = await processor(runner, [], tmp_path).process(
        claim_of(Job(id="j11", command=["true"])), signal
    )
    deferred = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert (ending.action, deferred.reason, runner.runs) == ("defer", LOCK_LOST, 0)


class LosesItsLockAsItEnds(Runner):
    """The run exits on its own; the lock keeper judges the claim lost just after (a Redis
    pause past the lock), or had already asked for a stop that the run never saw."""

    def __init__(self, stopped: bool) -> None:
        super().__init__()
        self.stopped = stopped

    async def run(self, ctx: RunContext) -> RunResult:
        self.runs += 1
        ctx.signal.abort(LOCK_LOST)
        return RunResult(started=True, exit_code=0, started_ms=1, ended_ms=2, stopped=self.stopped)


async def test_a_run_that_ended_before_its_stop_keeps_its_own_outcome(tmp_path: Path) -> None:
    """Handed back, it would run again although it completed: its outcome is finished with
    its record instead (fenced, so a claim that is really gone changes nothing; a refused
    finish keeps the outcome, tests/daemon/test_lane.py)."""
    claim = claim_of(Job(id="j12", command=["true"]))
    ending = await processor(LosesItsLockAsItEnds(stopped=False), [], tmp_path).process(
        claim, AbortSignal()
    )
    result = msgspec.json.decode(ending.payload, type=Result)
    assert (ending.action, result.outcome) == ("finish", "completed")
    assert ending.record is not None and ending.record.outcome == "completed"


async def test_a_run_our_stop_ended_is_handed_back(tmp_path: Path) -> None:
    claim = claim_of(Job(id="j13", command=["true"]))
    ending = await processor(LosesItsLockAsItEnds(stopped=True), [], tmp_path).process(
        claim, AbortSignal()
    )
    deferred = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert (ending.action, deferred.reason) == ("defer", LOCK_LOST)


@pytest.mark.parametrize(
    "job",
    [
        Job(id="j9", command=["true"], size=Size(memory="0")),
        Job(id="j9", command=["true"], size=Size(cpus=0.0)),
        Job(id="j9", command=["echo", "a\0b"]),
        Job(id="j9", command=["true"], kind="local", folder="/srv/site"),  # on the shared queue
    ],
    ids=["memory 0", "cpus 0", "nul in command", "local on the shared queue"],
)
async def test_a_document_that_skipped_the_submit_checks_is_refused_at_pickup(
    tmp_path: Path, job: Job
) -> None:
    """Regression: such documents ran without limits, or failed at create as infra (retried)."""
    runner = Runner()
    ending = await processor(runner, [], tmp_path).process(claim_of(job), AbortSignal())
    result = msgspec.json.decode(ending.payload, type=Result)
    assert (ending.action, result.outcome, result.reason) == ("finish", "policy", "invalid-job")
    assert runner.runs == 0


async def test_a_wait_condition_this_release_cannot_read_is_refused_wait_unreadable(
    tmp_path: Path,
) -> None:
    def ending_of(document: dict):
        raw = msgspec.json.encode(document)
        claim = Claim("jobs", "j9", "h:1", 1, 0, 0, raw)
        return processor(Runner(), [], tmp_path).process(claim, AbortSignal())

    newer = await ending_of({"id": "j9", "waitFor": [{"until": "tomorrow"}]})
    result = msgspec.json.decode(newer.payload, type=Result)
    assert (result.outcome, result.reason) == ("policy", WAIT_UNREADABLE)
    broken = await ending_of({"id": "j9", "attempts": 0, "waitFor": [{"until": "tomorrow"}]})
    assert msgspec.json.decode(broken.payload, type=Result).reason == INVALID_JOB


async def test_an_ending_says_whether_the_job_waited(tmp_path: Path) -> None:
    plain = await processor(Runner(), [], tmp_path).process(
        claim_of(Job(id="j1", command=["true"])), AbortSignal()
    )
    job = Job(id="j2", command=["true"], wait_for=[WaitFor(after="2000-01-01T00:00:00Z")])
    waited = await processor(Runner(), [], tmp_path).process(claim_of(job), AbortSignal())
    assert (plain.waited, waited.waited) == (False, True)


class FarWindow:
    """A pause window whose fixed end lies decades away (`"end": "2099-12-31..."` loads)."""

    name = "pause"

    async def check(self, pickup: Pickup) -> Decision:
        return Defer(75 * 365 * 24 * 3_600_000, PAUSE_WINDOW)


async def test_a_deferral_past_the_finish_bound_is_due_at_the_bound_and_its_batch_lands(
    redis, prefix: str, tmp_path: Path
) -> None:
    queue = Queue(redis, "jobs", prefix)
    jobs = [Job(id=f"far{n}", command=["true"]) for n in range(2)]
    await queue.enqueue([NewJob(job.id, encode_job(job)) for job in jobs])
    batch = await queue.claim(2, "h", 30_000)
    far, done = batch.claims
    ending = await processor(Runner(), [FarWindow()], tmp_path).process(far, AbortSignal())
    assert ending.action == "defer" and 0 < ending.delay_ms <= MAX_DELAY_MS
    ran = await processor(Runner(), [], tmp_path).process(done, AbortSignal())
    items = [
        Finish(ending.action, far.id, far.token, ending.payload, ending.delay_ms),
        Finish(ran.action, done.id, done.token, ran.payload, ran.delay_ms),
    ]
    assert await queue.finish(items) == [True, True]  # one far deferral takes no batch with it
    due_ms = await redis.zscore(queue.keys.delayed, far.id)
    assert due_ms == pytest.approx(batch.now_ms + MAX_DELAY_MS, abs=60_000)
    record = msgspec.json.decode(ending.payload, type=DeferRecord)
    assert record.reason == PAUSE_WINDOW
