"""The wait-for gate on a real Redis, with the injected clock, a seeded random source and a
scripted checker (the real one, a subprocess, has tests of its own: test_wait_profiles.py)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from dispatch.fleet.leases import holders
from dispatch.gates.base import Admit, Defer, Refuse
from dispatch.gates.wait import gate as wait_module
from dispatch.gates.wait.claims import IdentityClaims
from dispatch.gates.wait.gate import CHECK_KEY
from dispatch.gates.wait.profiles import Verdict
from dispatch.model import Job, WaitFor, iso
from dispatch.queue.keys import lease_keys
from dispatch.queue.transitions import NewJob, Queue
from dispatch.reasons import (
    WAIT_ABORTED,
    WAIT_AFTER,
    WAIT_AFTER_BEYOND_MAX,
    WAIT_EXPIRED,
    WAIT_HOLD,
    WAIT_PROFILE_UNKNOWN,
    WAIT_REFUSED,
    WAIT_SUPERSEDE,
    WAIT_SUPERSEDED,
    WAIT_THROTTLED,
    WAIT_UNANSWERABLE,
    WAIT_UNREADABLE,
)
from tests.support.waits import (
    HOUR,
    Rig,
    assert_discipline,
    job,
    make_rig,
    profile,
    step,
)


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    seen: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(wait_module, "event", lambda name, **f: seen.append((name, f)))
    return seen


@pytest.fixture
async def rig(redis: Redis, prefix: str, logged: list) -> AsyncIterator[Rig]:
    async with AsyncExitStack() as stack:
        yield await make_rig(stack, redis, prefix, logged)


def after(rig: Rig, seconds: float) -> WaitFor:
    return WaitFor(after=iso(rig.clock.now_ms() + int(seconds * 1000)))


async def enqueue(redis: Redis, prefix: str, *jobs: Job) -> Queue:
    """Jobs in their queue, so their liveness can be read."""
    queue = Queue(redis, "jobs", prefix)
    await queue.enqueue([NewJob(j.id, b"{}") for j in jobs])
    return queue


async def run_until_done(rig: Rig, j: Job, limit: int = 500) -> tuple[Any, int]:
    """Look again at every deferral's due time, as the queue would; the ending and the checks."""
    for _ in range(limit):
        decision = await rig.look(j)
        if not isinstance(decision, Defer):
            return decision, len(rig.checker.asked)
        step(rig.clock, decision.delay_ms)
    raise AssertionError("the wait never ended")


# -- no wait, tier 1 and the determinate refusals --------------------------------------------


@pytest.mark.anyio
async def test_a_job_without_wait_for_is_admitted_without_a_look(rig: Rig) -> None:
    assert isinstance(await rig.look(job()), Admit)
    assert await rig.redis.keys(f"{rig.prefix}:*") == []


@pytest.mark.anyio
async def test_an_after_ahead_defers_to_exactly_that_instant(rig: Rig) -> None:
    decision = await rig.look(job(after(rig, 3600)))
    assert decision == Defer(3_600_000, WAIT_AFTER, detail=decision.detail)
    rig.clock.advance(3599.5)  # within the 1 s margin: it has arrived
    assert isinstance(await rig.look(job(WaitFor(after=iso(rig.clock.now_ms() + 500)))), Admit)


@pytest.mark.anyio
async def test_a_past_after_passes(rig: Rig) -> None:
    assert isinstance(await rig.look(job(after(rig, -60))), Admit)


@pytest.mark.anyio
async def test_an_after_beyond_the_ceiling_is_refused_at_once(rig: Rig) -> None:
    decision = await rig.look(job(after(rig, 31 * 24 * HOUR)))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_AFTER_BEYOND_MAX
    assert "30d" in decision.sentence


@pytest.mark.anyio
async def test_an_undeclared_profile_is_refused_before_any_hold(rig: Rig) -> None:
    decision = await rig.look(job(after(rig, 24 * HOUR), profile("typo"), dedup="k"))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_PROFILE_UNKNOWN
    assert "`typo`" in decision.sentence
    assert await rig.claims.holder("k") is None
    assert rig.checker.asked == []


@pytest.mark.anyio
async def test_an_after_this_release_cannot_read_is_refused(rig: Rig) -> None:
    decision = await rig.look(job(WaitFor(after="next tuesday")))  # built past the validation
    assert isinstance(decision, Refuse) and decision.reason == WAIT_UNREADABLE


@pytest.mark.anyio
async def test_a_profile_asked_of_a_target_on_a_job_without_one_is_refused(rig: Rig) -> None:
    plain = Job(id="p1", wait_for=[profile("jira")])
    decision = await rig.look(plain)
    assert isinstance(decision, Refuse) and decision.reason == WAIT_UNREADABLE
    assert isinstance(await rig.look(Job(id="p2", wait_for=[profile("ci")])), Defer)


# -- tier 2: the checks ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_check_is_given_the_target_id_and_go_admits(rig: Rig) -> None:
    rig.checker.verdicts = ["go"]
    assert isinstance(await rig.look(job(profile("jira"))), Admit)
    local = job(profile("jira"), id="l1", kind="local", folder="/srv/site", repo=None, number=None)
    assert isinstance(await rig.look(local), Admit)
    assert rig.checker.asked == [("check-jira", "acme/web#7"), ("check-jira", "/srv/site")]
    assert rig.events("wait_cleared") == []  # it never held: no wait cleared


@pytest.mark.anyio
async def test_profiles_run_in_order_and_the_first_that_is_not_go_decides(rig: Rig) -> None:
    rig.checker.verdicts = ["go", "hold", "go"]
    decision = await rig.look(job(profile("jira"), profile("ci")))
    assert isinstance(decision, Defer) and decision.reason == WAIT_HOLD
    assert "`ci`" in decision.detail
    assert [name for name, _ in rig.checker.asked] == ["check-jira", "check-ci"]


@pytest.mark.anyio
async def test_a_day_of_checks_at_a_quarter_hour_ends_expired_after_96(rig: Rig) -> None:
    rig.gate.limits = replace(rig.gate.limits, interval_ms=15 * 60_000)
    rig.gate.parts = replace(rig.gate.parts, random=lambda: 0.0)
    start = rig.clock.now_ms()
    decision, checks = await run_until_done(rig, job(profile("jira"), dedup="k"))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_EXPIRED
    assert checks == 96
    assert "after 96 checks" in decision.sentence
    assert rig.clock.now_ms() - start == 95 * 15 * 60_000
    assert await rig.claims.holder("k") is None


@pytest.mark.anyio
async def test_with_jitter_a_day_long_wait_ends_at_the_max_wait(rig: Rig) -> None:
    rig.gate.limits = replace(rig.gate.limits, interval_ms=15 * 60_000)
    start = rig.clock.now_ms()
    decision, checks = await run_until_done(rig, job(profile("jira"), dedup="k"))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_EXPIRED
    held_h = (rig.clock.now_ms() - start) / 3_600_000
    assert 24 <= held_h < 24.3 and checks < 96  # the clamp lands the last check on the bound
    assert await rig.claims.holder("k") is None


@pytest.mark.anyio
async def test_hold_delays_back_off_with_jitter_and_never_pass_the_max_wait(rig: Rig) -> None:
    rig.gate.limits = replace(rig.gate.limits, max_ms=int(1.5 * HOUR * 1000))
    j = job(profile("jira"))
    delays = []
    for _ in range(200):
        decision = await rig.look(j)
        if not isinstance(decision, Defer):
            break
        delays.append(decision.delay_ms)
        step(rig.clock, decision.delay_ms)
    assert all(60_000 <= d < 66_000 for d in delays[:10])
    assert all(120_000 <= d < 132_000 for d in delays[11:-1])
    assert sum(delays) <= 1.5 * HOUR * 1000
    assert isinstance(decision, Refuse) and decision.reason == WAIT_EXPIRED


@pytest.mark.anyio
async def test_a_condition_that_clears_on_the_deciding_check_still_runs(rig: Rig) -> None:
    rig.gate.limits = replace(rig.gate.limits, max_checks=3)
    rig.checker.verdicts = ["hold", "hold", "go"]
    decision, checks = await run_until_done(rig, job(profile("jira")))
    assert isinstance(decision, Admit) and checks == 3
    [cleared] = rig.events("wait_cleared")
    assert cleared["held_ms"] > 0


@pytest.mark.anyio
async def test_faults_in_a_row_end_unanswerable_and_a_hold_resets_them(rig: Rig) -> None:
    faults: list[Verdict] = ["fault"] * 4
    rig.checker.verdicts = [*faults, "hold", *faults, "fault"]
    decision, checks = await run_until_done(rig, job(profile("jira")))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_UNANSWERABLE
    assert checks == 10
    assert "5 times in a row" in decision.sentence


@pytest.mark.anyio
async def test_never_is_refused_with_the_checks_own_words(rig: Rig) -> None:
    rig.checker.verdicts = ["hold", "never"]
    decision, _ = await run_until_done(rig, job(profile("jira"), dedup="k"))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_REFUSED
    assert "said never" in decision.sentence
    assert await rig.claims.holder("k") is None


@pytest.mark.anyio
async def test_an_aborted_check_re_defers_11_s_and_counts_nothing(rig: Rig) -> None:
    rig.checker.verdicts = ["fault", "aborted", "hold"]
    j = job(profile("jira"))
    await rig.look(j)
    decision = await rig.look(j)
    assert decision == Defer(11_000, WAIT_ABORTED, detail=decision.detail)
    state = await rig.states.get("jobs", "j1")
    assert state is not None and (state.checks, state.faults) == (1, 1)


@pytest.mark.anyio
async def test_a_cleared_wait_is_not_checked_again_on_a_later_pickup(rig: Rig) -> None:
    rig.checker.verdicts = ["hold", "go"]
    j = job(profile("jira"))
    await run_until_done(rig, j)
    assert isinstance(await rig.look(j), Admit)  # a later gate deferred it: no new check
    assert len(rig.checker.asked) == 2
    state = await rig.states.get("jobs", "j1")
    assert state is not None and state.cleared_ms and state.answer == "go"


@pytest.mark.anyio
async def test_the_wait_state_tells_the_story(rig: Rig) -> None:
    j = job(profile("jira"), dedup="k")
    start = rig.clock.now_ms()
    for _ in range(3):
        decision = await rig.look(j)
        step(rig.clock, decision.delay_ms)
    state = await rig.states.get("jobs", "j1")
    assert state is not None
    assert (state.since_ms, state.checks, state.faults, state.answer) == (start, 3, 0, "not yet")
    assert (state.line, state.profile, state.target) == ("said hold", "jira", "acme/web#7")
    assert state.next_ms == rig.clock.now_ms() and state.gives_up_ms == start + 86_400_000
    assert state.identity == "k"
    assert await rig.redis.pttl(f"{rig.prefix}:wait:state:jobs:j1") > 0


# -- check slots and the fleet lease ---------------------------------------------------------


def test_a_throttled_re_check_never_comes_before_11_s() -> None:
    from dispatch.gates.wait.policy import WaitLimits, throttle_delay_ms

    limits = WaitLimits(interval_ms=30_000)
    assert throttle_delay_ms(limits, 0, lambda: 0.0) == 11_000  # a quarter would be 7.5 s
    assert throttle_delay_ms(limits, 0, lambda: 0.999) == 12_098
    assert throttle_delay_ms(WaitLimits(interval_ms=3_600_000), 0, lambda: 0.0) == 225_000


def test_check_slots_never_take_the_last_job_slot() -> None:
    from dispatch.gates.wait.policy import WaitLimits, check_slots

    assert check_slots(WaitLimits(check_slots=5), 3) == 2
    assert check_slots(WaitLimits(check_slots=1), 8) == 1
    assert check_slots(WaitLimits(check_slots=4), 1) == 1  # one slot: checks still run


@pytest.mark.anyio
async def test_a_denied_slot_throttles_and_five_in_a_row_are_told_once(rig: Rig) -> None:
    held = rig.slots.try_acquire(CHECK_KEY, 1, owner="other")
    j = job(profile("jira"))
    for _ in range(7):
        decision = await rig.look(j)
        assert isinstance(decision, Defer) and decision.reason == WAIT_THROTTLED
        assert 15_000 <= decision.delay_ms < 16_500  # a quarter of the 60 s interval
        step(rig.clock, decision.delay_ms)
    assert len(rig.events("wait_capacity_exceeded")) == 1
    assert held is not None and rig.slots.release(held)
    assert isinstance(await rig.look(j), Defer)  # checked at last: the run of denials ends
    state = await rig.states.get("jobs", "j1")
    assert state is not None and (state.throttles, state.checks) == (0, 1)


@pytest.mark.anyio
async def test_a_job_never_granted_a_check_expires_at_the_max_wait(rig: Rig) -> None:
    rig.gate.limits = replace(rig.gate.limits, max_ms=3_600_000)
    rig.slots.try_acquire(CHECK_KEY, 1, owner="other")
    start = rig.clock.now_ms()
    decision, checks = await run_until_done(rig, job(profile("jira")))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_EXPIRED and checks == 0
    assert rig.clock.now_ms() - start >= 3_600_000


@pytest.mark.anyio
async def test_the_fleet_check_lease_bounds_checks_across_hosts(
    redis: Redis, prefix: str, logged: list
) -> None:
    async with AsyncExitStack() as stack:
        a = await make_rig(stack, redis, prefix, logged, "host-a", wait_fleet_checks=1)
        b = await make_rig(stack, redis, prefix, logged, "host-b", wait_fleet_checks=1)
        lease = await a.leases.acquire(CHECK_KEY, 1)
        assert lease is not None
        decision = await b.look(job(profile("jira")))
        assert isinstance(decision, Defer) and decision.reason == WAIT_THROTTLED
        assert "fleet-wide" in decision.detail
        await a.leases.release(lease)
        assert await b.look(job(profile("jira"))) != decision
        assert b.checker.asked and await holders(redis, lease_keys(CHECK_KEY, prefix)) == {}


# -- identity: supersede, claims, takeover ---------------------------------------------------


@pytest.mark.anyio
async def test_a_second_job_with_the_dedup_key_is_superseded_while_the_first_holds(
    rig: Rig,
) -> None:
    first, second = job(profile("jira"), dedup="k"), job(profile("jira"), id="j2", dedup="k")
    await enqueue(rig.redis, rig.prefix, first, second)
    assert isinstance(await rig.look(first), Defer)
    decision = await rig.look(second)
    assert isinstance(decision, Refuse) and decision.reason == WAIT_SUPERSEDED
    assert "j1" in decision.sentence
    assert await rig.claims.holder("k") == "jobs j1"


@pytest.mark.anyio
async def test_jobs_without_a_dedup_key_are_never_superseded(rig: Rig) -> None:
    assert isinstance(await rig.look(job(profile("jira"))), Defer)
    assert isinstance(await rig.look(job(profile("jira"), id="j2")), Defer)


@pytest.mark.anyio
async def test_the_trigger_is_part_of_the_identity(rig: Rig) -> None:
    a = job(after(rig, 60), dedup="k", trigger="label-rule")
    b = job(after(rig, 60), id="j2", dedup="k", trigger="comment-rule")
    assert isinstance(await rig.look(a), Defer) and isinstance(await rig.look(b), Defer)


@pytest.mark.anyio
async def test_a_sibling_of_a_cleared_wait_is_refused(rig: Rig) -> None:
    rig.checker.verdicts = ["hold", "go"]
    await run_until_done(rig, job(profile("jira"), dedup="k"))
    decision = await rig.look(job(profile("jira"), id="j2", dedup="k"))
    assert isinstance(decision, Refuse) and decision.reason == WAIT_SUPERSEDED
    assert "already finished waiting" in decision.sentence
    assert await rig.claims.holder("k") is None


@pytest.mark.anyio
async def test_a_dead_holder_is_taken_over_and_logged(rig: Rig) -> None:
    first, second = job(after(rig, 600), dedup="k"), job(after(rig, 600), id="j2", dedup="k")
    await enqueue(rig.redis, rig.prefix, second)  # the first is not in its queue: gone
    await rig.claims.claim("k", "jobs", first.id, 60_000)
    decision = await rig.look(second)
    assert isinstance(decision, Defer) and decision.reason == WAIT_AFTER
    assert rig.events("wait_claim_taken_over") == [{"job": "j2", "previous": "j1"}]
    assert await rig.claims.holder("k") == "jobs j2"


@pytest.mark.anyio
async def test_a_holder_whose_liveness_cannot_be_read_defers_15_s(rig: Rig) -> None:
    class Blind(IdentityClaims):
        async def is_live(self, queue: str, job_id: str) -> bool:
            raise RedisConnectionError("gone")

    rig.gate.parts = replace(rig.gate.parts, claims=Blind(rig.redis, rig.prefix))
    await rig.claims.claim("k", "jobs", "other", 60_000)
    decision = await rig.look(job(after(rig, 600), dedup="k"))
    assert isinstance(decision, Defer) and decision.reason == WAIT_SUPERSEDE
    assert (decision.delay_ms, decision.holder) == (15_000, "other")


# -- the hold discipline ---------------------------------------------------------------------


def verdict_runs() -> Iterable[list[Verdict]]:
    rng = random.Random(13)
    kinds: list[Verdict] = ["go", "hold", "never", "fault", "aborted"]
    for _ in range(60):
        yield [rng.choice(kinds) for _ in range(rng.randint(1, 12))]


@pytest.mark.anyio
async def test_after_any_verdicts_no_slot_lease_or_claim_is_left_held(
    redis: Redis, prefix: str, logged: list
) -> None:
    """Seeded runs of every verdict; the hypothesis form is in test_wait_discipline.py."""
    async with AsyncExitStack() as stack:
        r = await make_rig(stack, redis, prefix, logged, wait_fleet_checks=2)
        for n, verdicts in enumerate(verdict_runs()):
            await assert_discipline(r, verdicts, f"j{n}")


@pytest.mark.anyio
async def test_a_wait_for_an_instant_does_not_eat_the_max_wait_of_the_checks(rig: Rig) -> None:
    j = job(after(rig, 20 * HOUR), profile("jira"))
    start = rig.clock.now_ms()
    first = await rig.look(j)
    assert isinstance(first, Defer) and first.reason == WAIT_AFTER
    step(rig.clock, first.delay_ms)
    held = await rig.look(j)  # the first check, 20 h after the job first waited
    assert isinstance(held, Defer) and held.reason == WAIT_HOLD
    state = await rig.states.get("jobs", "j1")
    assert state is not None and state.since_ms == start
    assert state.gives_up_ms == rig.clock.now_ms() + 86_400_000
    rig.checker.verdicts = ["go"]
    step(rig.clock, held.delay_ms)
    assert isinstance(await rig.look(j), Admit)
    [cleared] = rig.events("wait_cleared")
    assert cleared["held_ms"] == rig.clock.now_ms() - start
