"""The host's slot counter (pure logic): resized live (settings.json's `concurrency` changed),
more is room at once, fewer leaves running jobs be and gives no room until below the count; and
a small host claiming ahead while its runs are fast (tests/daemon/test_ahead.py runs it)."""

from __future__ import annotations

from dispatch.daemon.capacity import (
    AHEAD_AFTER,
    AHEAD_CLAIMS,
    AHEAD_PER_SLOT,
    COHORTS_FROM,
    FAST_RUN_S,
    Capacity,
)


def test_raising_the_slots_is_room_at_once() -> None:
    c = Capacity(1, batch=50)
    assert c.take(draining=False) == 1 and not c.room.is_set()
    c.resize(3)
    assert c.room.is_set() and c.take(draining=False) == 2 and c.batch == 3


def test_lowering_the_slots_claims_nothing_until_the_running_are_below_it() -> None:
    c = Capacity(3, batch=50)
    assert c.take(draining=False) == 3
    c.resize(1)
    assert c.free == -2 and not c.room.is_set()
    c.give(1)  # one of the three ended: two still run, one slot allowed
    assert c.take(draining=False) == 0
    assert c.take(draining=False, freed=1) == 0 and c.free == 0  # a flush's freed slot too
    c.give(1)
    assert c.take(draining=False) == 1


def test_a_resize_reshapes_the_claim_batch() -> None:
    c = Capacity(4, batch=50)
    c.resize(COHORTS_FROM * 2)
    assert c.cohorts and c.batch == COHORTS_FROM
    c.resize(4)
    assert not c.cohorts and c.batch == 4


def fast_runs(c: Capacity, n: int = AHEAD_AFTER) -> None:
    for _ in range(n):
        c.ran(0.0)


def test_a_small_host_claims_ahead_after_a_run_of_fast_runs() -> None:
    c = Capacity(10, batch=100)
    fast_runs(c, AHEAD_AFTER - 1)
    assert not c.ahead and c.claims == 10 and c.batch == 10
    c.ran(FAST_RUN_S / 2)
    assert c.ahead and c.claims == AHEAD_CLAIMS and c.slots == 10
    assert c.cohorts and c.batch == AHEAD_CLAIMS // 2
    assert c.take(draining=False) == AHEAD_CLAIMS // 2 and c.free == AHEAD_CLAIMS // 2


def test_one_slow_run_or_a_claim_that_waited_in_vain_ends_it() -> None:
    c = Capacity(10, batch=100)
    fast_runs(c)
    half = AHEAD_CLAIMS // 2
    assert c.take(draining=False) == half and c.take(draining=False) == half
    over = AHEAD_CLAIMS - 10
    c.ran(FAST_RUN_S)  # a run as long as that is not fast
    assert not c.ahead and c.claims == 10 and c.free == -over  # no room till `over` have ended
    fast_runs(c)
    assert c.ahead and c.free == 0
    c.cool()
    assert not c.ahead and c.fast == 0 and c.free == -over


def test_a_host_of_many_slots_never_claims_ahead() -> None:
    c = Capacity(COHORTS_FROM, batch=100)
    fast_runs(c)
    assert not c.ahead and c.claims == COHORTS_FROM


def test_a_resize_while_claiming_ahead_keeps_claiming_ahead() -> None:
    c = Capacity(4, batch=100)
    fast_runs(c)
    c.resize(10)
    assert c.ahead and c.claims == AHEAD_CLAIMS and c.free == AHEAD_CLAIMS
    c.resize(COHORTS_FROM * 2)  # many slots: no longer ahead, the slots are the claims
    assert not c.ahead and c.claims == COHORTS_FROM * 2 and c.free == COHORTS_FROM * 2
    c.resize(2)
    assert c.claims == 2 and c.free == 2


def test_a_tiny_host_claims_only_a_few_ahead_a_slot() -> None:
    """Its waiting claims must begin within the hold at the fast runs' pace, like a larger
    host's: so many per slot at most."""
    c = Capacity(2, batch=100)
    fast_runs(c)
    assert c.ahead and c.claims == 2 * AHEAD_PER_SLOT and not c.cohorts
    assert c.take(draining=False) == 2 * AHEAD_PER_SLOT
