"""The queue against a pure-Python model, driven by a hypothesis state machine.

After every step each known job sits in exactly one of wait / delayed / active / done (read
from the Redis structures themselves), nothing is lost, duplicated or unknown, and the model
agrees on the state, the wait order, the lock holders and the counters.

Delays are 0 or 60 s so the model stays deterministic while the server clock moves; locks are
60 s, or 1 ms where expiry is the point (the sweep rule waits for server time to pass them).
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    invariant,
    precondition,
    rule,
)

from dispatch.errors import NotFound
from dispatch.queue.transitions import Action, Finish, NewJob, Queue
from tests.support.machines import STATES, RedisMachine, run_on
from tests.support.polling import eventually_sync

LONG_MS = 60_000


class QueueMachine(RedisMachine):
    prefix_stem = "sm"

    def __init__(self) -> None:
        super().__init__()
        self.queue = Queue(self.redis, "jobs", self.prefix)
        self.k = self.queue.keys
        self.state: dict[str, str] = {}  # id -> one of STATES
        self.wait: list[str] = []  # ready ids in claim order
        self.due: dict[str, float] = {}  # delayed id -> due ms (server's, read back)
        self.held: dict[str, str] = {}  # active id -> current token
        self.short: set[str] = set()  # active ids under a 1 ms lock
        self.stale: list[tuple[str, str]] = []  # (id, token) of ended or swept claims
        self.attempts: dict[str, int] = {}
        self.stalls: dict[str, int] = {}
        self.dedup: dict[str, str] = {}  # dedup key -> first id (60 s windows never lapse)
        self.cancel_requested: set[str] = set()
        self.paused = False
        self.count = 0

    # -- helpers ---------------------------------------------------------------------------

    def now_ms(self) -> int:
        seconds, micros = self.run(self.redis.time())
        return seconds * 1000 + micros // 1000

    def to_delayed(self, job_id: str) -> None:
        self.state[job_id] = "delayed"
        self.due[job_id] = self.run(self.redis.zscore(self.k.delayed, job_id))

    def end_claim(self, job_id: str) -> None:
        self.stale.append((job_id, self.held.pop(job_id)))
        self.short.discard(job_id)
        self.cancel_requested.discard(job_id)

    def promote(self, now_ms: int) -> None:
        for job_id in sorted((j for j, d in self.due.items() if d <= now_ms), key=self._due_key):
            del self.due[job_id]
            self.state[job_id] = "wait"
            self.wait.append(job_id)

    def _due_key(self, job_id: str) -> tuple[float, str]:
        return self.due[job_id], job_id

    # -- rules -----------------------------------------------------------------------------

    @rule(delayed=st.booleans(), dedup=st.sampled_from(["", "", "k1", "k2"]))
    def enqueue(self, delayed: bool, dedup: str) -> None:
        self.count += 1
        job_id = f"j{self.count}"
        new = NewJob(job_id, b"{}", 0, LONG_MS if delayed else 0, dedup, LONG_MS if dedup else 0)
        [answer] = self.run(self.queue.enqueue([new]))
        if dedup and dedup in self.dedup:
            assert (answer.id, answer.created) == (self.dedup[dedup], False)
            return
        assert (answer.id, answer.created) == (job_id, True)
        if dedup:
            self.dedup[dedup] = job_id
        self.attempts[job_id] = self.stalls[job_id] = 0
        if delayed:
            self.to_delayed(job_id)
        else:
            self.state[job_id] = "wait"
            self.wait.append(job_id)

    @precondition(lambda self: self.state)
    @rule(data=st.data())
    def enqueue_taken_id(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.state)))
        (answer,) = self.run(self.queue.enqueue([NewJob(job_id, b"{}")]))
        assert answer.taken and not answer.created

    @rule(count=st.integers(0, 4), short=st.booleans())
    def claim(self, count: int, short: bool) -> None:
        batch = self.run(self.queue.claim(count, "h", 1 if short else LONG_MS))
        self.promote(batch.now_ms)
        taken = [] if self.paused else self.wait[:count]
        assert [c.id for c in batch.claims] == taken
        assert batch.next_due_ms == min(self.due.values(), default=0)
        del self.wait[: len(taken)]
        for c in batch.claims:
            assert (c.attempt, c.stalls) == (self.attempts[c.id] + 1, self.stalls[c.id])
            assert c.token not in {t for _, t in self.stale}
            self.state[c.id] = "active"
            self.held[c.id] = c.token
            if short:
                self.short.add(c.id)

    @precondition(lambda self: self.held)
    @rule(
        data=st.data(),
        action=st.sampled_from(["finish", "retry", "defer"]),
        delay=st.sampled_from([0, LONG_MS]),
    )
    def end(self, data: st.DataObject, action: Action, delay: int) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.held)))
        ending = Finish(
            action, job_id, self.held[job_id], b"{}", 0 if action == "finish" else delay
        )
        assert self.run(self.queue.finish([ending])) == [True]
        self.end_claim(job_id)
        if action == "finish":
            self.state[job_id] = "done"
            return
        self.attempts[job_id] += action == "retry"
        self.to_delayed(job_id)

    @precondition(lambda self: self.stale)
    @rule(data=st.data(), action=st.sampled_from(["finish", "retry", "defer"]))
    def end_stale(self, data: st.DataObject, action: Action) -> None:
        job_id, token = data.draw(st.sampled_from(self.stale))
        assert self.run(self.queue.finish([Finish(action, job_id, token, b"{}")])) == [False]

    @precondition(lambda self: self.held or self.stale)
    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        stale = data.draw(st.lists(st.sampled_from(self.stale), max_size=2)) if self.stale else []
        locks = sorted(self.held.items()) + stale
        if not locks:
            return  # an empty call is bad input (covered in tests/lua)
        lapsed = sorted(self.short)  # a lock whose deadline passed is never revived
        if lapsed:
            self.wait_past(max(self.run(self.redis.zmscore(self.k.active, lapsed))))
        lost, cancels = self.run(self.queue.extend(locks, LONG_MS))
        assert lost == lapsed + [job_id for job_id, _ in stale]
        assert cancels == sorted(self.cancel_requested - self.short)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def request_cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.held)))
        self.run(self.queue.request_cancel(job_id, self.held[job_id], LONG_MS))
        self.cancel_requested.add(job_id)

    @rule(max_stalls=st.integers(0, 2))
    def sweep(self, max_stalls: int) -> None:
        expiring = sorted(self.short)
        deadlines = self.run(self.redis.zmscore(self.k.active, expiring)) if expiring else []
        self.wait_past(max(deadlines, default=0))
        requeued, failed = self.run(self.queue.sweep(max_stalls, b'{"reason":"stalled"}'))
        order = [j for _, j in sorted(zip(deadlines, expiring, strict=True))]
        for job_id in order:
            self.stalls[job_id] += 1
            self.end_claim(job_id)
            self.state[job_id] = "done" if self.stalls[job_id] > max_stalls else "wait"
        assert failed == [j for j in order if self.state[j] == "done"]
        assert requeued == [j for j in order if self.state[j] == "wait"]
        self.wait[:0] = requeued

    def wait_past(self, instant_ms: float) -> None:
        """Let server time pass a 1 ms lock (polled: the server's clock decides)."""
        eventually_sync(lambda: self.now_ms() > instant_ms, timeout=5.0, every=0.001)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from([*sorted(self.state), "unknown"]))
        state = self.state.get(job_id)
        if state is None:
            with pytest.raises(NotFound):
                self.run(self.queue.cancel(job_id, b"{}", f"{job_id}#1", b"{}"))
            return
        code, token = self.run(self.queue.cancel(job_id, b"{}", f"{job_id}#9", b"{}"))
        expected = {"done": (3, ""), "active": (2, self.held.get(job_id))}
        assert (code, token) == expected.get(state, (1, ""))
        if state == "wait":
            self.wait.remove(job_id)
        elif state == "delayed":
            del self.due[job_id]
        if state in ("wait", "delayed"):
            self.state[job_id] = "done"

    @rule()
    def pause(self) -> None:
        self.run(self.queue.pause())
        self.paused = True

    @rule()
    def resume(self) -> None:
        self.run(self.queue.resume())
        self.paused = False

    # -- invariant -------------------------------------------------------------------------

    @invariant()
    def each_job_in_exactly_one_state(self) -> None:
        found = self.run(self.read_queue(self.k))
        wait = found["wait"]
        assert len(wait) == len(set(wait)), f"duplicated in wait: {wait}"
        seen: dict[str, list[str]] = {}
        for name in STATES:
            for job_id in found[name]:
                seen.setdefault(job_id, []).append(name)
        assert {j: s for j, s in seen.items() if len(s) != 1} == {}, "in several states"
        assert set(seen) == set(self.state), "lost or unknown jobs"
        assert {j: s[0] for j, s in seen.items()} == self.state
        assert wait == self.wait
        assert found["lock"] == self.held
        assert set(found["data"]) == set(self.state)
        assert found["paused"] == self.paused


def test_queue_matches_its_model(redis_url: str) -> None:
    run_on(QueueMachine, redis_url, examples=50, steps=30)
