from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.fleet.slots import Slots, SlotStatistics, Ticket


def test_grants_up_to_the_limit_then_counts_denials() -> None:
    slots = Slots()
    a, b = slots.try_acquire("gpu", 2), slots.try_acquire("gpu", 2)
    assert a is not None and b is not None and a != b
    assert slots.try_acquire("gpu", 2) is None
    assert slots.try_acquire("cpu", 2) is not None  # keys are independent
    assert slots.statistics("gpu") == SlotStatistics(held=2, limit=2, denials=1)
    assert slots.statistics("unknown") == SlotStatistics(held=0, limit=0, denials=0)


def test_double_release_never_frees_another_holders_slot() -> None:
    slots = Slots()
    first = slots.try_acquire("gpu", 1)
    assert first is not None and slots.release(first)
    second = slots.try_acquire("gpu", 1)
    assert second is not None
    assert not slots.release(first)  # already given back
    assert slots.holds(second) and slots.statistics("gpu").held == 1
    assert slots.try_acquire("gpu", 1) is None


def test_a_ticket_of_another_pool_is_not_ours() -> None:
    mine, theirs = Slots(), Slots()
    ticket = theirs.try_acquire("gpu", 1)
    assert ticket is not None
    assert mine.try_acquire("gpu", 1) is not None
    assert not mine.release(ticket)
    assert mine.statistics("gpu").held == 1


def test_limit_is_per_call() -> None:
    slots = Slots()
    held = [slots.try_acquire("gpu", 3) for _ in range(3)]
    assert all(held)
    assert slots.try_acquire("gpu", 2) is None  # lowered: holders stay, newcomers wait
    assert slots.statistics("gpu").limit == 2
    assert slots.try_acquire("gpu", 4) is not None  # raised: room at once
    assert slots.try_acquire("gpu", 0) is None


OPS = st.lists(st.tuples(st.booleans(), st.integers(0, 20), st.integers(0, 4)), max_size=200)


@settings(max_examples=100, deadline=None)
@given(ops=OPS)
def test_random_acquire_release_never_exceeds_limit(ops) -> None:
    slots, limit = Slots(), 3
    tickets: list[Ticket] = []
    for take, pick, drop_twice in ops:
        if take:
            ticket = slots.try_acquire("k", limit)
            assert (ticket is None) == (len(tickets) >= limit)
            if ticket:
                tickets.append(ticket)
        elif tickets:
            ticket = tickets.pop(pick % len(tickets))
            assert slots.release(ticket)
            for _ in range(drop_twice):
                assert not slots.release(ticket)
        assert slots.statistics("k").held == len(tickets) <= limit
