"""The host's slot counter resized live (pure logic: settings.json's `concurrency` changed):
more is room at once; fewer leaves running jobs be and gives no room until below the count."""

from __future__ import annotations

from dispatch.daemon.capacity import COHORTS_FROM, Capacity


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
