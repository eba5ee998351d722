"""A lane on a real Redis: what its pump does at a due instant with and without room."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch import log
from dispatch.clock import FakeClock
from dispatch.config.settings import Settings
from dispatch.daemon.capacity import Capacity
from dispatch.daemon.lane import Lane, Timing
from dispatch.daemon.tasks import Lifecycle
from dispatch.queue.faults import QueueFault
from dispatch.queue.transitions import Claim, ClaimBatch, Finish, NewJob, Queue
from dispatch.records.disk_log import RecordLog
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


def lane_of(redis: Redis, prefix: str, tmp_path: Path, slots: int, clock: FakeClock) -> Lane:
    started: list[Claim] = []
    return Lane(
        Queue(redis, "jobs", prefix),
        Settings(redis_url="", embedded=False, prefix=prefix, host="h1"),
        Timing(idle_claim_s=30.0),
        Capacity(slots, 10),
        Lifecycle(),
        clock,
        RecordLog(tmp_path),
        redis,
        lambda claim, sent: started.append(claim),
    )


async def test_due_with_no_room_passes_a_wake_up_on(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """A host that learned the due time but is full wakes one that has room."""
    clock = FakeClock()
    lane = lane_of(redis, prefix, tmp_path, 0, clock)
    lane.must_claim = False
    lane.due_at = clock.monotonic()  # due now
    pump = asyncio.create_task(lane.pump())
    try:
        await eventually(lambda: _marked(redis, lane))
        assert lane.due_at is None  # passed on once, not again at every wake
    finally:
        lane.life.draining = True
        lane.wake.set()
        await asyncio.wait_for(pump, 5)


async def _marked(redis: Redis, lane: Lane) -> bool:
    return await redis.zscore(lane.queue.keys.marker, "w") is not None


async def test_a_refused_finish_is_dropped_not_retried(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """A finish the script refuses (a bug) is logged once, the room it took for the next claim
    is given back, and it is not put back to pending: sending it again would be refused again."""
    lane = lane_of(redis, prefix, tmp_path, 2, FakeClock())
    await lane.queue.enqueue([NewJob("a", b'{"id":"a"}'), NewJob("b", b'{"id":"b"}')])
    (claim,) = (await lane.queue.claim(1, "h1", 60_000)).claims
    lane.capacity.adjust(-1)  # the slot its claim holds, as the lane's own claims take one
    lane.end(Finish("finish", claim.id, claim.token, b"not json"), None)
    await lane.flights.flush()
    assert lane.flights.pending == []
    assert lane.capacity.free == 2
    assert await lane.queue.claims() == [(claim.id, claim.token)]  # its lock lapses, then a sweep
    assert await redis.lrange(lane.queue.keys.wait, 0, -1) == [b"b"]


async def test_one_bad_ending_never_takes_its_batch_with_it(
    redis: Redis, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch a script refuses goes again in halves: the good endings land, the bad one is
    dropped alone and named. Before, the whole batch was dropped and its completed jobs lapsed
    and ran again."""
    stream = io.StringIO()
    monkeypatch.setattr(log.log, "stream", stream)
    monkeypatch.setattr(log.log, "human", False)
    lane = lane_of(redis, prefix, tmp_path, 5, FakeClock())
    ids = ["a", "b", "c", "d", "e"]
    await lane.queue.enqueue([NewJob(i, b"{}") for i in ids])
    claims = (await lane.queue.claim(5, "h1", 60_000)).claims
    lane.capacity.adjust(-5)
    for claim in claims:
        payload = b"not json" if claim.id == "d" else b"{}"
        lane.end(Finish("finish", claim.id, claim.token, payload), None)
    await lane.flights.flush()
    assert lane.flights.pending == []
    done = await redis.zrange(lane.queue.keys.done, 0, -1)
    assert sorted(done) == [b"a", b"b", b"c", b"e"]
    assert await lane.queue.claims() == [("d", claims[3].token)]  # lapses, then a sweep
    assert lane.capacity.free == 5
    said = [json.loads(line) for line in stream.getvalue().splitlines()]
    refused = [e for e in said if e["event"] == "finish_refused_bad_call"]
    assert [(e["jobs"], e["of"]) for e in refused] == [(["d"], 5)]


class FailingAfter(Queue):
    """Its finish calls answer until `answers` are spent, then Redis goes away."""

    answers = 1

    async def finish(self, items: Sequence[Finish]) -> list[bool]:
        if self.answers == 0:
            raise QueueFault("finish: connection lost")
        self.answers -= 1
        return await super().finish(items)


async def test_a_fault_while_a_bad_batch_goes_again_keeps_what_is_not_known(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    lane = lane_of(redis, prefix, tmp_path, 4, FakeClock())
    lane.queue = FailingAfter(redis, "jobs", prefix)
    await lane.queue.enqueue([NewJob(i, b"{}") for i in "abcd"])
    claims = (await lane.queue.claim(4, "h1", 60_000)).claims
    lane.capacity.adjust(-4)
    for claim in claims:
        lane.end(Finish("finish", claim.id, claim.token, b"{" if claim.id == "d" else b"{}"), None)
    await lane.flights.flush()  # a, b land as one half; c, d meet the fault
    assert await redis.zrange(lane.queue.keys.done, 0, -1) == [b"a", b"b"]
    assert [f.id for f, _ in lane.flights.pending] == ["c", "d"]


async def test_a_finish_refused_after_a_sweep_keeps_its_runs_outcome(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """Redis was away past the lock: the sweep put the job back, so the finish is refused.
    Its record is mirrored all the same (nobody else holds the job), for the re-pickup to
    settle on; a deferral's record (a stopped run) is not."""
    lane = lane_of(redis, prefix, tmp_path, 2, FakeClock())
    await lane.queue.enqueue([NewJob("a", b'{"id":"a"}'), NewJob("b", b'{"id":"b"}')])
    a, b = (await lane.queue.claim(2, "h1", 60_000)).claims
    await redis.zadd(lane.queue.keys.active, {"a": 0, "b": 0})  # both locks lapsed
    assert (await lane.queue.sweep(3, b'{"reason":"stalled"}'))[0] == ["a", "b"]
    ran = b'{"id":"a","attempt":1,"outcome":"completed"}'
    stopped = b'{"id":"b","attempt":1,"outcome":"infra"}'
    lane.end(Finish("finish", "a", a.token, b"{}", run_id="a#1", run=ran), None)
    lane.end(Finish("defer", "b", b.token, b"{}", 1000, run_id="b#1", run=stopped), None)
    await lane.flights.flush()
    assert await redis.hget(lane.queue.keys.runs, "a#1") == ran
    assert await redis.hget(lane.queue.keys.runs, "b#1") is None


async def test_an_outcome_blocked_by_a_fresh_claim_is_kept_once_that_claim_defers(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """Another daemon re-claimed the job first; its settled gate defers one beat (the lock is
    let go), and the outcome tried again in the background lands for its next look."""
    lane = lane_of(redis, prefix, tmp_path, 0, FakeClock())
    await lane.queue.enqueue([NewJob("a", b'{"id":"a"}')])
    (a,) = (await lane.queue.claim(1, "h1", 60_000)).claims
    await redis.hset(lane.queue.keys.lock, "a", "h2:99")  # swept, then taken by another host
    ran = b'{"id":"a","attempt":1,"outcome":"completed"}'
    lane.end(Finish("finish", "a", a.token, b"{}", run_id="a#1", run=ran), None)
    await lane.flights.flush()
    assert await redis.hget(lane.queue.keys.runs, "a#1") is None and lane.flights.keeping
    await redis.hdel(lane.queue.keys.lock, "a")  # the other host's pickup deferred
    assert await eventually(lambda: redis.hget(lane.queue.keys.runs, "a#1"), timeout=5) == ran


async def test_an_ending_keeps_its_slot_until_its_flush_hands_it_to_the_next_claim(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """A job that ended gives no room to the pump or the watcher while its ending waits: the
    flush that sends it claims with its slot, in the same call."""
    lane = lane_of(redis, prefix, tmp_path, 1, FakeClock())
    started: list[Claim] = []
    lane.start = lambda claim, sent: started.append(claim)
    await lane.queue.enqueue([NewJob("a", b'{"id":"a"}'), NewJob("b", b'{"id":"b"}')])
    await lane.claim()
    (a,) = started
    lane.end(Finish("finish", "a", a.token, b"{}"), None)
    assert lane.capacity.free == 0 and not lane.capacity.room.is_set()
    await lane.flights.flush()
    assert [c.id for c in started] == ["a", "b"]
    assert lane.capacity.free == 0
    assert await redis.hget(lane.queue.keys.result, "a") == b"{}"


async def test_two_cohorts_that_ended_together_leave_as_two_flights(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """Endings of both cohorts met while no flight was out: each flight carries one cohort
    and claims one again, so the host keeps two cohorts rather than one of all its slots."""
    lane = lane_of(redis, prefix, tmp_path, 64, FakeClock())
    lane.capacity = Capacity(64, 100)  # cohorts of 32
    lane.queue = queue = CountingQueue(redis, "jobs", prefix)
    started: list[Claim] = []
    lane.start = lambda claim, sent: started.append(claim)
    await lane.queue.enqueue([NewJob(f"j{i}", b"{}") for i in range(128)])
    await lane.claim()
    await lane.claim()  # landed while the first cohort had only just begun: it waits
    assert len(started) == 32 and len(lane.held) == 32
    lane.begin_held()
    first = list(started)
    assert len(first) == 64 and lane.capacity.free == 0
    for claim in first:
        lane.end(Finish("finish", claim.id, claim.token, b"{}"), None)
    flusher = asyncio.create_task(lane.flights.flusher())
    try:
        await eventually(lambda: _is(len(started) == 128 and not lane.flights))
    finally:
        lane.life.close()
        lane.flights.flush_now.set()
        await asyncio.wait_for(flusher, 5)
    assert queue.calls == [(32, 32), (32, 32)]
    assert await redis.hlen(lane.queue.keys.result) == 64
    assert lane.capacity.free == 0 and lane.flights.pending == []


async def _is(value: bool) -> bool:
    return value


class CountingQueue(Queue):
    """The real queue, noting what each finish-and-claim call carried."""

    calls: list[tuple[int, int]]

    def __init__(self, redis: Redis, name: str, prefix: str) -> None:
        super().__init__(redis, name, prefix)
        self.calls = []

    async def finish_and_claim(
        self, items: Sequence[Finish], count: int, host: str, lock_ms: int
    ) -> tuple[list[bool], ClaimBatch]:
        self.calls.append((len(items), count))
        return await super().finish_and_claim(items, count, host, lock_ms)


def cohort_lane(redis: Redis, prefix: str, tmp_path: Path) -> tuple[Lane, list[Claim]]:
    """A lane of 64 slots, so claims take cohorts of 32, noting what it begins."""
    lane = lane_of(redis, prefix, tmp_path, 64, FakeClock())
    lane.capacity = Capacity(64, 100)
    started: list[Claim] = []
    lane.start = lambda claim, sent: started.append(claim)
    return lane, started


async def test_a_cohort_that_lands_as_the_other_begins_waits_for_the_others_flight(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """Begun together, two cohorts would end and fly together; the second waits until the
    first's endings are sent, and begins with that call on the wire."""
    lane, started = cohort_lane(redis, prefix, tmp_path)
    await lane.queue.enqueue([NewJob(f"j{i}", b"{}") for i in range(96)])
    await lane.claim()
    await lane.claim()
    first, waiting = list(started), [c for c, _ in lane.held]
    assert len(first) == 32 and len(waiting) == 32
    for claim in first:
        lane.end(Finish("finish", claim.id, claim.token, b"{}"), None)
    await lane.flights.flush()
    assert started[32:] == waiting  # begun by the flight of the first cohort's endings
    assert len(lane.held) == 32  # what that flight claimed waits in turn for the next one
    assert lane.capacity.free == 0


async def test_a_held_cohort_begins_on_its_own_when_no_flight_comes(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """Jobs that run long send nothing soon: the held cohort waits HOLD_S at most."""
    lane, started = cohort_lane(redis, prefix, tmp_path)
    await lane.queue.enqueue([NewJob(f"j{i}", b"{}") for i in range(64)])
    await lane.claim()
    await lane.claim()
    assert len(started) == 32
    await eventually(lambda: _is(len(started) == 64), timeout=2)
    assert lane.held == []


async def test_held_claims_are_not_handed_back_as_lost(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """After a failed claim call the lane hands back claims nobody here runs; a held cohort
    is this host's own, about to run."""
    lane, started = cohort_lane(redis, prefix, tmp_path)
    await lane.queue.enqueue([NewJob(f"j{i}", b"{}") for i in range(64)])
    await lane.claim()
    await lane.claim()
    lane.unsure = True
    await lane.recover({(c.id, c.token) for c in started})
    assert len(await lane.queue.claims_of("h1")) == 64
    assert await redis.llen(lane.queue.keys.wait) == 0


async def test_claims_made_while_recover_reads_are_not_taken_for_lost_ones(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """A claim call that begins and lands while recover reads this host's claims may put its
    claims in what is read, though recover's view of its own runs predates them: it gives up
    and looks again later, rather than hand back jobs this host is running."""
    lane = lane_of(redis, prefix, tmp_path, 4, FakeClock())
    started: list[Claim] = []
    lane.start = lambda claim, sent: started.append(claim)
    lane.queue = queue = ClaimingMeanwhile(redis, "jobs", prefix, lane)
    await queue.enqueue([NewJob(f"j{i}", b"{}") for i in range(4)])
    lane.unsure = True
    await lane.recover(set())
    assert len(started) == 4  # claimed while recover read
    assert sorted(await queue.claims_of("h1")) == sorted((c.id, c.token) for c in started)
    assert await redis.llen(queue.keys.wait) == 0 and lane.unsure  # nothing handed back
    await lane.recover({(c.id, c.token) for c in started})  # the next look finds them ours
    assert not lane.unsure and len(await queue.claims_of("h1")) == 4


class ClaimingMeanwhile(Queue):
    """The real queue; the first read of this host's claims lets the lane claim first."""

    def __init__(self, redis: Redis, name: str, prefix: str, lane: Lane) -> None:
        super().__init__(redis, name, prefix)
        self.lane, self.first = lane, True

    async def claims_of(self, host: str) -> list[tuple[str, str]]:
        if self.first:
            self.first = False
            await self.lane.claim()
        return await super().claims_of(host)


class HeldQueue(Queue):
    """The real queue, whose finish-and-claim replies are held until the test lets them go."""

    def __init__(self, redis: Redis, name: str, prefix: str) -> None:
        super().__init__(redis, name, prefix)
        self.held = 0
        self.release = asyncio.Event()

    async def finish_and_claim(
        self, items: Sequence[Finish], count: int, host: str, lock_ms: int
    ) -> tuple[list[bool], ClaimBatch]:
        reply = await super().finish_and_claim(items, count, host, lock_ms)
        self.held += 1
        await self.release.wait()  # every held reply is read in the step the test lets go
        return reply


async def test_endings_that_arrive_while_both_flights_fly_leave_when_both_land_in_one_step(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """Both flights' replies read in one loop step: the endings that came meanwhile go out at
    once, not when some other job ends (their claims are renewed by no one while they wait)."""
    lane, started = cohort_lane(redis, prefix, tmp_path)
    lane.queue = queue = HeldQueue(redis, "jobs", prefix)
    await queue.enqueue([NewJob(f"j{i:03}", b"{}") for i in range(140)])
    await lane.claim()
    await lane.claim()
    lane.begin_held()
    assert len(started) == 64
    late = (await queue.claim(6, "h1", 60_000)).claims  # run elsewhere in the lane's name
    lane.capacity.adjust(-len(late))  # the slots their claims hold
    flusher = asyncio.create_task(lane.flights.flusher())
    try:
        for claim in started[:64]:
            lane.end(Finish("finish", claim.id, claim.token, b"{}"), None)
        await eventually(lambda: _is(queue.held == 2))
        for claim in late:
            lane.end(Finish("finish", claim.id, claim.token, b"{}"), None)
        queue.release.set()
        done = queue.keys.result
        ids = [c.id for c in late]
        assert await eventually(lambda: _all_in(redis, done, ids), timeout=5)
    finally:
        lane.life.close()
        lane.flights.flush_now.set()
        await asyncio.wait_for(flusher, 5)


async def _all_in(redis: Redis, key: str, ids: list[str]) -> bool:
    return all(await asyncio.gather(*(redis.hexists(key, i) for i in ids)))


async def test_recover_leaves_a_flights_fresh_claims_alone_while_it_keeps_refused_outcomes(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """A flight's finish was refused (the job swept and taken) and its call claimed another job.
    While the refused outcome is kept, before the new claim is the lane's, an unsure lane's
    recover must not hand that claim back: the lane starts it right after."""
    lane, started = cohort_lane(redis, prefix, tmp_path)
    await lane.queue.enqueue([NewJob("a", b'{"id":"a"}'), NewJob("b", b'{"id":"b"}')])
    (a,) = (await lane.queue.claim(1, "h1", 60_000)).claims
    await redis.hset(lane.queue.keys.lock, "a", "h2:99")  # swept, then taken by another host
    lane.capacity.adjust(-1)  # a's slot
    lane.unsure = True  # an earlier claim call's reply was lost
    entered, release = asyncio.Event(), asyncio.Event()
    keep = lane.flights._keep_outcomes

    async def held_keep(refused, claimed) -> None:
        entered.set()
        await release.wait()
        await keep(refused, claimed)

    lane.flights._keep_outcomes = held_keep  # type: ignore[method-assign]
    ran = b'{"id":"a","attempt":1,"outcome":"completed"}'
    lane.end(Finish("finish", "a", a.token, b"{}", run_id="a#1", run=ran), None)
    flush = asyncio.create_task(lane.flights.flush())
    try:
        await asyncio.wait_for(entered.wait(), 5)
        await lane.recover(running=set())
    finally:
        release.set()
        await asyncio.wait_for(flush, 5)
    assert [c.id for c in started] == ["b"]
    assert {job for job, _ in await lane.queue.claims()} == {"a", "b"}  # b is still ours
    assert await redis.lrange(lane.queue.keys.wait, 0, -1) == []  # b was not handed back
