"""Exactly once, as a model test: the queue scripts, the fleet mirror, the settled gate, the
folder mutex and the spend ledger, driven in any order by a hypothesis state machine on a real
Redis, the way daemons that stall, crash and deliver late would drive them.

A run is started only when the real `SettledGate` admits its claim and the folder and the spend
cap let it in, as the daemon's gates do. It then ends in one of the ways a run ends (completed,
refused by the job, an exit of its own, stopped and handed back), with its finish delivered at
once or held back (its daemon cut off from Redis) and delivered later, after its lock may have
lapsed, been swept and been claimed again; or its daemon crashes and the boot of its successor
hands the claim back. A host may also claim ahead (daemon/ahead.py): such a claim waits unbegun,
then begins, or goes back (it waited in vain, or its daemon drained), or lapses meanwhile and is
stopped before it starts when its turn comes (the lock keeper's clock). The model keeps only
what the fleet must never get wrong:

- every job is in exactly one of wait, delayed, active, done; every active job has one lock;
- no attempt of a job reaches its own exit twice (a completed job never runs again);
- a claim's fence (its token's number) is larger than every one before it;
- every folder held belongs to a run whose claim is active with its token;
- the spend counters never hold more than their caps (used + held).

A live run's lock never lapses here: the lock keeper stops a run by its own clock before its
lock could (daemon/lock_keeper.py), so a lapse is only ever of a claim whose run has ended or
died.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Literal

import msgspec
from hypothesis import strategies as st
from hypothesis.stateful import (
    invariant,
    precondition,
    rule,
)

from dispatch.config.limits import zone
from dispatch.config.schemas import Overlay, ScopedLimit
from dispatch.fleet.folders import FolderLocks, FolderTicket
from dispatch.gates.base import Defer, Pickup, Settled
from dispatch.gates.settled import SettledGate, own_exit
from dispatch.model import Job, RunRecord, encode_job
from dispatch.queue.transitions import Claim, Finish, NewJob, Queue
from dispatch.reasons import COMPLETED, INFRA, JOB_REFUSED, POLICY, SHUTDOWN, exit_code
from dispatch.records.disk_log import decode, encode
from dispatch.records.mirror import RunMirror, record_runs
from dispatch.spend.ledger import Blocked, Reservation, SpendLedger, reservation_id
from dispatch.spend.plan import Counter, Subject, counters
from tests.support.machines import STATES, RedisMachine, run_on

LOCK_MS = 60_000
FOLDERS = ("/w/a", "/w/a/b", "/w/c")
# weighted to the endings that leave a record behind for a later claim to trip on
ENDINGS = ("completed", "completed", "stopped", "stopped", "refused", "exit-3")
Action = Literal["finish", "retry", "defer"]


@dataclass
class Run:
    claim: Claim
    folder: FolderTicket
    reservation: Reservation


@dataclass
class Late:
    """A finish its daemon could not send yet (cut off from Redis)."""

    finish: Finish
    token: str


class ExactlyOnce(RedisMachine):
    prefix_stem = "eo"

    def __init__(self) -> None:
        super().__init__()
        self.queue = Queue(self.redis, "jobs", self.prefix)
        self.mirror = RunMirror(self.redis, self.prefix)
        self.gate = SettledGate(self.mirror)
        self.ledger = SpendLedger(self.redis, self.prefix, retry_s=())
        self.folders = FolderLocks()
        self.jobs: dict[str, str] = {}  # id -> folder
        self.runs: dict[str, Run] = {}  # job id -> its live run
        self.late: list[Late] = []
        self.waiting: list[Claim] = []  # claimed ahead of a free slot, not begun
        self.lapsed: set[str] = set()  # tokens of waiting claims whose lock lapsed
        self.keeping: list[Late] = []  # outcomes a claim blocked, tried again (flights.py)
        self.dead: list[tuple[str, str]] = []  # (id, token) of claims whose daemon crashed
        self.own_exits: dict[tuple[str, int], int] = {}  # (id, attempt) -> runs that got there
        self.last_fence = 0
        self.count = 0

    def plan(self) -> list[Counter]:
        rows = [msgspec.convert({"scope": "*", "day": 16, "dayUsd": 21}, ScopedLimit)]
        subject = Subject(None, None, None, None)
        now = int(time.time() * 1000)
        return counters(rows, subject, 1.5, Overlay(), now, zone("UTC"), self.ledger.keys)

    # -- rules -----------------------------------------------------------------------------

    def unfinished(self) -> int:
        return len(self.jobs) - self.run(self.redis.zcard(self.queue.keys.done))

    # few jobs at a time, each taken round the loop many times: that is where a job runs twice
    @precondition(lambda self: self.unfinished() < 2)
    @rule(folder=st.sampled_from(FOLDERS), ahead=st.booleans())
    def enqueue(self, folder: str, ahead: bool) -> None:
        """`ahead`: the host that takes it claims ahead, so the claim waits unbegun."""
        self.count += 1
        job_id = f"j{self.count}"
        self.run(self.queue.enqueue([NewJob(job_id, encode_job(Job(id=job_id, command=["x"])))]))
        self.jobs[job_id] = folder
        if ahead:
            self.claim_ahead()
        else:
            self.pump()

    def pump(self) -> None:
        """What a daemon does between any two steps: renew its live runs' locks (never lost:
        the lock keeper stops a run before its lock could lapse) and take one claim round."""
        if self.runs:
            pairs = sorted((run.claim.id, run.claim.token) for run in self.runs.values())
            lost, _ = self.run(self.queue.extend(pairs, LOCK_MS))
            assert lost == [], "a live run's lock was lost"
        for claim in self.claim():
            self.pick_up(claim)

    def claim(self) -> list[Claim]:
        batch = self.run(self.queue.claim(2, "h", LOCK_MS))
        for claim in batch.claims:
            fence = int(claim.token.rpartition(":")[2])
            assert fence > self.last_fence, "a fence went back"
            self.last_fence = fence
        return batch.claims

    def claim_ahead(self) -> None:
        """A host claims beyond its free slots: the claims wait for a run to end."""
        self.waiting += self.claim()

    @precondition(lambda self: self.waiting)
    @rule()
    def begin_waiting(self) -> None:
        """A run ended: the longest-waiting claim begins, unless its lock lapsed while it
        waited (nothing renews a waiting claim): the lock keeper stops it before it starts,
        and its ending is fenced."""
        claim = self.waiting.pop(0)
        if claim.token in self.lapsed:
            self.send(Finish("defer", claim.id, claim.token, b"{}", 0))
        else:
            self.pick_up(claim)
        self.pump()

    @precondition(lambda self: self.waiting)
    @rule()
    def hand_back_waiting(self) -> None:
        """The waiting claims go back: no run ended in time, or their daemon drains."""
        self.run(self.queue.hand_back([(c.id, c.token) for c in self.waiting]))
        self.waiting.clear()
        self.pump()

    def pick_up(self, claim: Claim) -> None:
        """What the daemon's gates do with a claim, in their order: settled, folder, spend."""
        job = Job(id=claim.id, command=["x"])
        decision = self.run(self.gate.check(Pickup(claim, job)))
        if isinstance(decision, Settled):
            action: Action = "finish" if decision.record.outcome in (COMPLETED, POLICY) else "retry"
            self.send(Finish(action, claim.id, claim.token, b"{}", 0))
            return
        if isinstance(decision, Defer):  # the one beat for a late outcome (gates/settled.py)
            self.send(Finish("defer", claim.id, claim.token, b"{}", 0))
            self.deliver_all(claim.id)
            return
        ticket = self.folders.try_acquire(self.jobs[claim.id], owner=claim.id)
        if ticket is None:
            self.send(Finish("defer", claim.id, claim.token, b"{}", 0))
            return
        rid = reservation_id("jobs", claim.id, claim.attempt, claim.token)
        spend = self.run(self.ledger.reserve(rid, self.plan(), urgent=False))
        if isinstance(spend, Blocked):
            self.folders.release(ticket)
            self.send(Finish("finish", claim.id, claim.token, b"{}", 0))  # over-budget
            return
        self.runs[claim.id] = Run(claim, ticket, spend)

    def send(self, finish: Finish) -> bool:
        [ok] = self.run(self.queue.finish([finish]))
        return ok

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), how=st.sampled_from(ENDINGS), cut_off=st.booleans())
    def end(self, data: st.DataObject, how: str, cut_off: bool) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.runs)))
        run = self.runs.pop(job_id)
        claim = run.claim
        record, action = self.outcome(claim, how)
        if own_exit(record):
            key = (claim.id, claim.attempt)
            self.own_exits[key] = self.own_exits.get(key, 0) + 1
        self.folders.release(run.folder)
        keys = [c.key for c in run.reservation.counters]
        self.run(self.ledger.close_now(run.reservation.rid, keys, "settle"))
        run_id = f"{claim.id}#{claim.attempt}"
        finish = Finish(action, claim.id, claim.token, b"{}", 0, run_id, encode(record))
        if cut_off:
            self.late.append(Late(finish, claim.token))
        else:
            assert self.send(finish), "a live run's claim was lost"
        self.pump()

    def outcome(self, claim: Claim, how: str) -> tuple[RunRecord, Action]:
        record = partial(
            RunRecord,
            id=claim.id,
            attempt=claim.attempt,
            host="h",
            queue="jobs",
            started_at="2026-01-01T00:00:00.000Z",
            claim=claim.token,
        )
        if how == "completed":
            return record(outcome=COMPLETED, exit_code=0), "finish"
        if how == "refused":
            return record(outcome=POLICY, reason=JOB_REFUSED, exit_code=2), "finish"
        if how == "exit-3":
            return record(outcome=INFRA, reason=exit_code(3), exit_code=3), "retry"
        return record(outcome=INFRA, reason=SHUTDOWN, exit_code=143), "defer"

    @precondition(lambda self: self.late)
    @rule(data=st.data())
    def deliver_late(self, data: st.DataObject) -> None:
        self.deliver(self.late.pop(data.draw(st.integers(0, len(self.late) - 1))))
        self.pump()

    def deliver_all(self, job_id: str) -> None:
        """A daemon cut off from Redis delivers within the settled gate's beat, or the job
        runs again: that wait is the design's bound (docs/design.md), so the model holds to it."""
        for late in [late for late in self.late if late.finish.id == job_id]:
            self.late.remove(late)
            self.deliver(late)
        for late in [late for late in self.keeping if late.finish.id == job_id]:
            self.keeping.remove(late)
            self.keep(late)

    def deliver(self, late: Late) -> None:
        """Redis answers again: the held finish goes, and if refused its outcome is kept, as
        the lane's flights do (daemon/flights.py `_keep_outcomes`)."""
        if self.send(late.finish) or late.finish.action == "defer":
            return
        self.keep(late)

    def keep(self, late: Late) -> None:
        """Another claim holds the job: tried again in the background, within the beat."""
        f = late.finish
        argv: list[str | bytes | int] = [f.id, late.token, f.run_id, f.run]
        if not self.run(record_runs(self.redis, self.queue.keys, argv)):
            self.keeping.append(late)

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """The run's daemon dies: its folder goes with the process, its reservation stays open
        for the sweep, and its claim waits for a lapse or its successor's boot."""
        run = self.runs.pop(data.draw(st.sampled_from(sorted(self.runs))))
        self.folders.release(run.folder)
        self.dead.append((run.claim.id, run.claim.token))
        self.dead += [(c.id, c.token) for c in self.waiting]  # its waiting claims die with it
        self.waiting.clear()
        self.pump()

    @rule(ahead=st.booleans())
    def lapse_and_sweep(self, ahead: bool) -> None:
        """Every claim without a live run lapses (its deadline set back on the server), then a
        sweep; the lost runs' reservations are looked at twice, as two sweep periods would.
        `ahead`: the jobs swept back are claimed ahead first."""
        live = {run.claim.id for run in self.runs.values()}
        active = [i.decode() for i in self.run(self.redis.zrange(self.queue.keys.active, 0, -1))]
        lapsed = {job_id: 0 for job_id in active if job_id not in live}
        self.lapsed |= {c.token for c in self.waiting if c.id in lapsed}
        if lapsed:
            self.run(self.redis.zadd(self.queue.keys.active, lapsed))
        self.run(self.queue.sweep(3, b'{"reason":"stalled"}'))
        self.run(self.ledger.settle_lost())
        self.run(self.ledger.settle_lost())
        if ahead:  # what went back is claimed ahead again, by this host or another
            self.claim_ahead()
        self.pump()

    @precondition(lambda self: self.dead)
    @rule()
    def boot_hands_back(self) -> None:
        self.run(self.queue.hand_back(self.dead))
        self.dead.clear()
        self.pump()

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if not self.jobs:
            return
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        if job_id not in self.runs:  # a running job's cancel stops its run: an ending above
            self.run(self.queue.cancel(job_id, b"{}", f"{job_id}#0", b"{}"))
        self.pump()

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def no_attempt_reaches_its_own_exit_twice(self) -> None:
        assert {k: n for k, n in self.own_exits.items() if n > 1} == {}
        done = {k[0] for k, n in self.own_exits.items() if n and self.finished(k)}
        assert not done & set(self.runs), "a finished job is running again"

    def finished(self, key: tuple[str, int]) -> bool:
        raw = self.run(self.redis.hget(self.queue.keys.runs, f"{key[0]}#{key[1]}"))
        return raw is not None and decode(raw).outcome in (COMPLETED, POLICY)

    @invariant()
    def each_job_in_one_state_with_one_lock(self) -> None:
        found = self.run(self.read_queue(self.queue.keys))
        seen: dict[str, list[str]] = {}
        for name in STATES:
            for job_id in found[name]:
                seen.setdefault(job_id, []).append(name)
        assert {j: s for j, s in seen.items() if len(s) != 1} == {}
        assert set(seen) == set(self.jobs)
        locks = found["lock"]
        assert set(locks) == {j for j, s in seen.items() if s == ["active"]}
        for job_id, run in self.runs.items():
            assert locks.get(job_id) == run.claim.token, "a run without its claim"

    @invariant()
    def folders_are_held_by_live_runs(self) -> None:
        held = {(t.owner, t.path) for t in self.folders.held()}
        assert held == {(j, run.folder.path) for j, run in self.runs.items()}

    @invariant()
    def spend_stays_within_its_caps(self) -> None:
        for c in self.plan():
            used, held = self.run(self.redis.hmget(c.key, "used", "held"))
            assert int(used or 0) + int(held or 0) <= c.cap, f"{c.metric} past its cap"


def test_exactly_once_holds_in_any_order(redis_url: str, redis_kind: str) -> None:
    # the interleavings are the scripts' own; on a cluster, where each step costs four times
    # as much client time, a third of them shows the scripts answer there as they do here
    run_on(ExactlyOnce, redis_url, examples=150 if redis_kind == "standalone" else 50, steps=50)
