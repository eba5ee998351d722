from __future__ import annotations

from typing import Any

import pytest

from dispatch.config.settings import Settings
from dispatch.fleet.host_budget import HostBudget, JobSize
from dispatch.fleet.slots import Slots
from dispatch.gates.base import HOST_SLOT_DELAY_MS, Admit, Defer, Pickup
from dispatch.gates.host_slot import HOST_SLOT_KEY, HostSlotGate
from dispatch.model import Job
from tests.support.pickups import hold_names, pickup_of

pytestmark = pytest.mark.anyio

MACHINE = JobSize(memory=16 * 1024**3, cpus=8.0)


def pickup(job_id: str) -> Pickup:
    return pickup_of(Job(id=job_id))


def gate(slots: Slots, **kw: Any) -> HostSlotGate:
    s = Settings(redis_url="redis://unused", embedded=False, host="web-1", **kw)
    return HostSlotGate(s, slots, HostBudget(s, machine=MACHINE))


def release_all(p: Pickup) -> None:
    for _, release in reversed(p.holds):
        release()


async def test_takes_a_slot_per_job_up_to_the_concurrency() -> None:
    slots = Slots()
    g = gate(slots, concurrency=2)
    a, b = pickup("a"), pickup("b")
    assert await g.check(a) == Admit()
    assert await g.check(b) == Admit()
    assert hold_names(a) == ["host-slot"]
    assert slots.owners(HOST_SLOT_KEY) == ["a", "b"]


async def test_a_full_host_defers_host_slot() -> None:
    slots = Slots()
    g = gate(slots, concurrency=2)
    for job_id in ("a", "b"):
        await g.check(pickup(job_id))
    c = pickup("c")
    assert await g.check(c) == Defer(
        HOST_SLOT_DELAY_MS, "host-slot", holder=None, detail="all 2 host slots are busy"
    )
    assert c.holds == []


async def test_a_single_slot_is_named_in_the_singular() -> None:
    g = gate(Slots(), concurrency=1)
    await g.check(pickup("a"))
    decision = await g.check(pickup("b"))
    assert isinstance(decision, Defer) and decision.detail == "the one host slot is busy"


async def test_giving_the_hold_back_frees_the_slot_once() -> None:
    slots = Slots()
    g = gate(slots, concurrency=1)
    a = pickup("a")
    await g.check(a)
    release_all(a)
    b = pickup("b")
    assert await g.check(b) == Admit()
    release_all(a)  # a second give-back must not free b's slot
    assert slots.owners(HOST_SLOT_KEY) == ["b"]
    assert isinstance(await g.check(pickup("c")), Defer)


async def test_a_configured_budget_admits_without_a_slot() -> None:
    slots = Slots()
    g = gate(slots, concurrency=1, host_memory=8 * 1024**3)
    for job_id in ("a", "b", "c"):
        p = pickup(job_id)
        assert await g.check(p) == Admit()
        assert p.holds == []
    assert slots.keys() == []


async def test_the_slots_follow_the_pickups_config_live() -> None:
    from dispatch.config.schemas import ConfigSnapshot, Overlay

    slots = Slots()
    g = gate(slots, concurrency=1)
    first = pickup("a")
    assert await g.check(first) == Admit()
    raised = ConfigSnapshot(overlay=Overlay(concurrency={"*": 1, "web-1": 2}))
    assert await g.check(pickup_of(Job(id="b"), config=raised)) == Admit()  # its own row
    lowered = ConfigSnapshot(overlay=Overlay(concurrency={"*": 1}))
    third = await g.check(pickup_of(Job(id="c"), config=lowered))
    assert isinstance(third, Defer) and third.detail == "the one host slot is busy"
