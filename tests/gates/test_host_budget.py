from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.config.schemas import Project
from dispatch.config.settings import Settings
from dispatch.fleet.host_budget import HostBudget, JobSize, Reservation, describe, machine_size
from dispatch.gates.base import HOST_BUDGET_DELAY_MS, Admit, Defer, Pickup
from dispatch.gates.host_budget import HostBudgetGate
from dispatch.model import Job
from tests.support.pickups import hold_names, pickup_of

pytestmark = pytest.mark.anyio

GIB = 1024**3
MACHINE = JobSize(memory=64 * GIB, cpus=32.0)


def cfg(**kw: Any) -> Settings:
    return Settings(redis_url="redis://unused", embedded=False, host="web-1", **kw)


def budget(memory_gib: float = 8, cpus: float = 4.0) -> HostBudget:
    return HostBudget(cfg(host_memory=int(memory_gib * GIB), host_cpus=cpus), machine=MACHINE)


def size(memory_gib: float, cpus: float) -> JobSize:
    return JobSize(memory=int(memory_gib * GIB), cpus=cpus)


def pickup(job_id: str, memory_gib: float, cpus: float, project: Project | None = None) -> Pickup:
    return pickup_of(Job(id=job_id), project=project, size=size(memory_gib, cpus))


def test_the_configured_budget_comes_from_settings() -> None:
    b = budget(8, 4.0)
    assert b.configured and b.total == size(8, 4.0)


def test_a_half_configured_budget_takes_the_rest_from_the_machine() -> None:
    b = HostBudget(cfg(host_memory=8 * GIB), machine=MACHINE)
    assert b.configured and b.total == JobSize(8 * GIB, 32.0)
    b = HostBudget(cfg(host_cpus=2.0), machine=MACHINE)
    assert b.configured and b.total == JobSize(64 * GIB, 2.0)


def test_no_budget_means_the_machines_totals_unconfigured() -> None:
    assert not HostBudget(cfg(), machine=MACHINE).configured
    assert HostBudget(cfg(), machine=MACHINE).total == MACHINE
    machine = machine_size()
    assert machine.cpus == os.cpu_count() and machine.memory > 0
    assert HostBudget(cfg()).total == machine


def test_reservations_add_up_until_the_budget_is_full() -> None:
    b = budget(8, 4.0)
    a = b.try_reserve("a", size(3, 1.5), None, None)
    c = b.try_reserve("c", size(3, 1.5), "acme", None)
    assert a is not None and c is not None
    assert b.used() == size(6, 3.0)
    assert b.running() == ["a", "c"]
    assert b.project_used("acme") == size(3, 1.5)
    assert b.try_reserve("d", size(3, 0.5), None, None) is None  # memory is the bound
    assert b.try_reserve("d", size(1, 1.5), None, None) is None  # CPUs are the bound
    assert b.try_reserve("d", size(2, 1.0), None, None) is not None  # exactly full fits
    assert b.used() == b.total


def test_a_double_release_never_frees_another_reservation() -> None:
    b = budget(8, 4.0)
    first = b.try_reserve("a", size(8, 4.0), None, None)
    assert first is not None and b.release(first)
    second = b.try_reserve("b", size(8, 4.0), None, None)
    assert second is not None
    assert not b.release(first)
    assert b.running() == ["b"] and b.used() == size(8, 4.0)
    assert b.try_reserve("c", size(1, 1.0), None, None) is None


def test_a_project_stays_within_its_share_while_others_still_fit() -> None:
    b = budget(8, 4.0)
    assert b.try_reserve("a1", size(2, 1.0), "acme", 0.5) is not None
    assert b.try_reserve("a2", size(2, 1.0), "acme", 0.5) is not None
    assert b.try_reserve("a3", size(1, 0.5), "acme", 0.5) is None
    assert b.bound(size(1, 0.5), "acme", 0.5) == "share"
    assert b.try_reserve("o1", size(2, 1.0), "other", 0.5) is not None
    assert b.project_used("acme") == size(4, 2.0)


def test_a_share_is_rounded_not_floored() -> None:
    b = budget(10, 10.0)
    assert b.share_of(0.3).cpus == 3.0
    assert b.try_reserve("a", JobSize(3 * GIB, 3.0), "acme", 0.3) is not None


def test_misfit_names_what_can_never_hold_the_size() -> None:
    b = budget(8, 4.0)
    assert b.misfit(size(8, 4.0), None) is None
    assert b.misfit(size(9, 1.0), 0.5) == "host"
    assert b.misfit(size(1, 3.0), 0.5) == "share"
    assert b.misfit(size(4, 2.0), 0.5) is None


def test_describe_reads_as_plain_figures() -> None:
    assert describe(JobSize(int(1.5 * GIB), 1.0)) == "1.5 GiB and 1 CPU"
    assert describe(JobSize(4 * GIB, 0.5)) == "4.0 GiB and 0.5 CPUs"


async def test_the_gate_reserves_and_holds_until_given_back() -> None:
    b = budget(8, 4.0)
    gate = HostBudgetGate(b)
    p = pickup("a", 6, 2.0)
    assert await gate.check(p) == Admit()
    assert hold_names(p) == ["host-budget"]
    assert b.running() == ["a"]
    for _, release in p.holds:
        release()
        release()
    assert b.running() == [] and b.used() == JobSize(0, 0.0)


async def test_the_gate_defers_a_job_the_running_ones_leave_no_room_for() -> None:
    b = budget(8, 4.0)
    gate = HostBudgetGate(b)
    assert await gate.check(pickup("a", 6, 2.0)) == Admit()
    p = pickup("b", 4, 1.0)
    assert await gate.check(p) == Defer(
        HOST_BUDGET_DELAY_MS,
        "host-budget",
        detail="needs 4.0 GiB and 1 CPU, but running jobs use 6.0 GiB and 2 CPUs of this "
        "host's job budget of 8.0 GiB and 4 CPUs",
    )
    assert p.holds == [] and b.running() == ["a"]


async def test_the_gate_names_the_project_share_when_that_is_the_bound() -> None:
    b = budget(8, 4.0)
    gate = HostBudgetGate(b)
    acme = Project(id="acme", host_share=0.5)
    assert await gate.check(pickup("a", 3, 1.0, acme)) == Admit()
    decision = await gate.check(pickup("b", 2, 1.0, acme))
    assert decision == Defer(
        HOST_BUDGET_DELAY_MS,
        "host-budget",
        detail="needs 2.0 GiB and 1 CPU, but project acme's running jobs use 3.0 GiB and "
        "1 CPU of its 50% share of this host (4.0 GiB and 2 CPUs)",
    )
    assert await gate.check(pickup("c", 2, 1.0, Project(id="other"))) == Admit()


async def test_without_a_budget_the_gate_admits_without_a_hold() -> None:
    b = HostBudget(cfg(), machine=JobSize(1 * GIB, 1.0))
    p = pickup("a", 32, 16.0)
    assert await HostBudgetGate(b).check(p) == Admit()
    assert p.holds == [] and b.running() == []


async def test_the_gate_needs_the_size_gate_before_it() -> None:
    p = pickup("a", 1, 1.0)
    p.size = None
    with pytest.raises(RuntimeError):
        await HostBudgetGate(budget()).check(p)


# Property: whatever the order of reserves and releases, the budget and every share hold, a
# reserve is refused exactly when an exact integer model says it would overflow, and releasing
# everything leaves nothing in use.
SHARES = {None: None, "a": 0.5, "b": 0.3}
TOTAL_MB, TOTAL_MILLI = 16 * 1024, 10_000
Held = tuple[Reservation, int, int, str | None]  # reservation, MiB, milli-CPUs, project

reserve = st.tuples(
    st.just("reserve"),
    st.integers(0, 8 * 1024),  # MiB
    st.integers(1, 80).map(lambda n: n * 50),  # milli-CPUs, 0.05 steps
    st.sampled_from(sorted(SHARES, key=str)),
)
release = st.tuples(st.just("release"), st.integers(0, 50))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(reserve, release), max_size=60))
def test_random_reserves_and_releases_keep_every_bound(ops: list[tuple[Any, ...]]) -> None:
    b = HostBudget(cfg(host_memory=TOTAL_MB * 1024**2, host_cpus=TOTAL_MILLI / 1000))
    live: list[Held] = []
    for n, op in enumerate(ops):
        if op[0] == "release":
            if live:
                r = live.pop(op[1] % len(live))
                assert b.release(r[0]) and not b.release(r[0])
            continue
        _, mb, milli, project = op
        granted = b.try_reserve(
            f"j{n}", JobSize(mb * 1024**2, milli / 1000), project, SHARES[project]
        )
        assert (granted is not None) == model_fits(live, mb, milli, project)
        if granted is not None:
            live.append((granted, mb, milli, project))
        used = b.used()
        assert used.memory <= b.memory and used.cpus <= b.cpus
        # the sum kept as reservations come and go is the held ones' sum, exactly
        assert used == JobSize(
            sum(r[1] for r in live) * 1024**2, sum(r[2] for r in live) * 1_000_000 / 1e9
        )
        assert b.running() == [r[0].job_id for r in live]
    for r in live:
        b.release(r[0])
    assert b.used() == JobSize(0, 0.0) and b.running() == []


def model_fits(live: list[Held], mb: int, milli: int, project: str | None) -> bool:
    if sum(r[1] for r in live) + mb > TOTAL_MB or sum(r[2] for r in live) + milli > TOTAL_MILLI:
        return False
    share = SHARES[project]
    if share is None:
        return True
    mine = [r for r in live if r[3] == project]
    memory = (sum(r[1] for r in mine) + mb) * 1024**2
    fits_memory = memory <= round(share * (TOTAL_MB * 1024**2))
    fits_cpus = sum(r[2] for r in mine) + milli <= round(share * TOTAL_MILLI)
    return fits_memory and fits_cpus
