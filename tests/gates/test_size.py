from __future__ import annotations

from typing import Any

import pytest

from dispatch.config.schemas import ConfigSnapshot, Overlay, Project
from dispatch.config.settings import Settings
from dispatch.fleet.host_budget import HostBudget, JobSize
from dispatch.gates.base import NEVER_FITS_DELAY_MS, Admit, Defer, Pickup, Refuse
from dispatch.gates.size import SizeGate, resolve_size
from dispatch.model import Job, Size
from tests.support.pickups import pickup_of

pytestmark = pytest.mark.anyio

GIB = 1024**3
MACHINE = JobSize(memory=64 * GIB, cpus=32.0)


class Hosts:
    """A LiveHosts stand-in that counts how often it was asked."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.asked = 0

    async def count(self) -> int:
        self.asked += 1
        return self.n


def settings(**kw: Any) -> Settings:
    return Settings(redis_url="redis://unused", embedded=False, host="web-1", **kw)


def pickup(queue: str = "jobs", size: Size | None = None, project: Project | None = None) -> Pickup:
    return pickup_of(Job(id="j1", queue=queue, size=size), project=project)


def gate(hosts: int = 1, **kw: Any) -> tuple[SizeGate, Hosts]:
    s = settings(**kw)
    live = Hosts(hosts)
    return SizeGate(s, HostBudget(s, machine=MACHINE), live), live


BUDGET: dict[str, Any] = {"host_memory": 8 * GIB, "host_cpus": 4.0}


def test_the_project_row_wins_over_the_job_and_the_defaults() -> None:
    project = Project(id="acme", memory="6g", cpus=3)
    job = Job(id="j1", size=Size(memory="1g", cpus=1))
    assert resolve_size(project, job, settings()) == JobSize(6 * GIB, 3.0)


def test_each_field_falls_through_on_its_own() -> None:
    project = Project(id="acme", memory="6g")
    job = Job(id="j1", size=Size(cpus=1.5))
    assert resolve_size(project, job, settings()) == JobSize(6 * GIB, 1.5)
    job = Job(id="j1", size=Size(memory="512m"))
    assert resolve_size(None, job, settings(job_cpus=0.5)) == JobSize(512 * 1024**2, 0.5)


def test_the_env_defaults_size_a_job_nobody_sized() -> None:
    assert resolve_size(None, Job(id="j1"), settings()) == JobSize(4 * GIB, 2.0)
    s = settings(job_memory=2 * GIB, job_cpus=1.0)
    assert resolve_size(Project(id="acme"), Job(id="j1"), s) == JobSize(2 * GIB, 1.0)


async def test_a_job_that_fits_is_admitted_with_its_size_set() -> None:
    g, live = gate(**BUDGET)
    p = pickup(size=Size(memory="2g", cpus=1))
    assert await g.check(p) == Admit()
    assert p.size == JobSize(2 * GIB, 1.0)
    assert p.holds == []
    assert live.asked == 0  # a fitting job never asks the fleet


async def test_a_size_exactly_the_budget_fits() -> None:
    g, _ = gate(**BUDGET)
    assert await g.check(pickup(size=Size(memory="8g", cpus=4))) == Admit()


@pytest.mark.parametrize(
    "project", [Project(id="acme", memory="lots"), Project(id="acme", memory="0")]
)
async def test_an_unreadable_project_memory_is_refused(project: Project) -> None:
    g, _ = gate()
    decision = await g.check(pickup(project=project))
    assert isinstance(decision, Refuse)
    assert decision.reason == "project-size-invalid"
    assert "acme" in decision.sentence


async def test_project_cpus_below_zero_are_refused() -> None:
    g, _ = gate()
    decision = await g.check(pickup(project=Project(id="acme", cpus=-1)))
    assert isinstance(decision, Refuse) and decision.reason == "project-size-invalid"


async def test_too_big_for_the_host_on_its_own_queue_is_refused() -> None:
    g, live = gate(hosts=5, **BUDGET)
    decision = await g.check(pickup(queue="jobs@web-1", size=Size(memory="12g", cpus=2)))
    assert decision == Refuse(
        "job-size-exceeds-host",
        "the job needs 12.0 GiB and 2 CPUs, more than this host's job budget of "
        "8.0 GiB and 4 CPUs, so it can never start",
    )
    assert live.asked == 0  # a host queue is this host's alone


async def test_too_many_cpus_alone_never_fit() -> None:
    g, _ = gate(**BUDGET)
    decision = await g.check(pickup(size=Size(memory="1g", cpus=6)))
    assert isinstance(decision, Refuse) and decision.reason == "job-size-exceeds-host"


async def test_too_big_on_the_shared_queue_of_a_lone_host_is_refused() -> None:
    g, live = gate(hosts=1, **BUDGET)
    decision = await g.check(pickup(size=Size(memory="12g")))
    assert isinstance(decision, Refuse) and decision.reason == "job-size-exceeds-host"
    assert live.asked == 1


async def test_too_big_on_a_shared_queue_of_several_hosts_is_deferred() -> None:
    g, _ = gate(hosts=2, **BUDGET)
    p = pickup(size=Size(memory="12g", cpus=2))
    decision = await g.check(p)
    assert decision == Defer(
        NEVER_FITS_DELAY_MS,
        "size-never-fits",
        detail="needs 12.0 GiB and 2 CPUs, more than this host's job budget of "
        "8.0 GiB and 4 CPUs; waiting for a host that fits it",
    )
    assert p.size == JobSize(12 * GIB, 2.0)  # recorded with the deferral


async def test_beyond_the_project_share_is_refused_on_a_lone_host() -> None:
    g, _ = gate(**BUDGET)
    project = Project(id="acme", memory="6g", cpus=1, host_share=0.5)
    decision = await g.check(pickup(project=project))
    assert decision == Refuse(
        "job-size-exceeds-share",
        "the job needs 6.0 GiB and 1 CPU, more than project acme's 50% share of this host's "
        "job budget (4.0 GiB and 2 CPUs), so it can never start",
    )


async def test_beyond_the_project_share_is_deferred_on_a_shared_fleet() -> None:
    g, _ = gate(hosts=3, **BUDGET)
    project = Project(id="acme", memory="6g", cpus=1, host_share=0.5)
    decision = await g.check(pickup(project=project))
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.delay_ms) == ("size-never-fits", NEVER_FITS_DELAY_MS)
    assert "acme's 50% share" in decision.detail


async def test_the_host_bound_is_named_before_the_share() -> None:
    g, _ = gate(**BUDGET)
    project = Project(id="acme", memory="16g", host_share=0.5)
    decision = await g.check(pickup(project=project))
    assert isinstance(decision, Refuse) and decision.reason == "job-size-exceeds-host"


async def test_without_a_budget_the_machine_bounds_and_shares_do_not() -> None:
    s = settings()
    g = SizeGate(s, HostBudget(s, machine=JobSize(8 * GIB, 4.0)), Hosts(1))
    share = Project(id="acme", memory="6g", cpus=1, host_share=0.5)
    assert await g.check(pickup(project=share)) == Admit()  # the share is not enforced here
    decision = await g.check(pickup(size=Size(memory="12g")))
    assert isinstance(decision, Refuse) and decision.reason == "job-size-exceeds-host"


def test_settings_json_overrides_the_env_default_but_not_the_job_or_project() -> None:
    tuned = Overlay(job_memory="1g", job_cpus=0.5)
    assert resolve_size(None, Job(id="j1"), settings(), tuned) == JobSize(1 * GIB, 0.5)
    own = Job(id="j1", size=Size(memory="3g"))
    assert resolve_size(None, own, settings(), tuned) == JobSize(3 * GIB, 0.5)
    row = Project(id="acme", cpus=4.0)
    assert resolve_size(row, Job(id="j1"), settings(), tuned) == JobSize(1 * GIB, 4.0)


@pytest.mark.parametrize(
    "project",
    [
        Project(id="acme", memory="5m"),
        Project(id="acme", memory="2t"),
        Project(id="acme", cpus=0.001),
        Project(id="acme", cpus=float("nan")),
    ],
)
async def test_a_project_row_outside_the_bounds_is_refused(project: Project) -> None:
    decision = await gate()[0].check(pickup(project=project))
    assert isinstance(decision, Refuse) and decision.reason == "project-size-invalid"
    assert "acme" in decision.sentence


@pytest.mark.parametrize(
    ("size", "kw"),
    [
        (Size(memory="0"), {}),  # a document that reached Redis without the submitter's checks
        (Size(cpus=0.0), {}),
        (Size(cpus=600.0), {}),
        (None, {"job_memory": 0}),  # settings built in code, past the env parser
        (None, {"job_cpus": 0.0}),
    ],
)
async def test_a_job_size_outside_the_bounds_is_refused_whatever_its_source(
    size: Size | None, kw: dict[str, Any]
) -> None:
    g, _ = gate(**kw)
    p = pickup(size=size)
    decision = await g.check(p)
    assert isinstance(decision, Refuse) and decision.reason == "job-size-invalid"
    assert p.size is None


def test_the_bounds_themselves_are_sizes() -> None:
    job = Job(id="j1", size=Size(memory="6m", cpus=0.01))
    assert resolve_size(None, job, settings()) == JobSize(6 * 1024**2, 0.01)
    job = Job(id="j1", size=Size(memory="1t", cpus=512))
    assert resolve_size(None, job, settings()) == JobSize(1024 * GIB, 512.0)


async def test_an_answer_is_kept_per_snapshot_and_per_project_row() -> None:
    """Worked out once per snapshot, project row and job size; never another row's answer,
    even when a row built outside the snapshot is gone and a new one takes its place."""
    size_gate, _ = gate()
    first = pickup(project=Project(id="acme", memory="2g", cpus=1))
    assert isinstance(await size_gate.check(first), Admit)
    assert first.size == JobSize(2 * GIB, 1.0)
    for memory, cpus in (("3g", 2), ("4g", 3)):  # fresh rows, one after the other
        later = pickup(project=Project(id="acme", memory=memory, cpus=cpus))
        assert isinstance(await size_gate.check(later), Admit)
        assert later.size == JobSize(int(memory[0]) * GIB, float(cpus))
    plain = pickup()
    tuned = pickup_of(Job(id="j2"), config=ConfigSnapshot(overlay=Overlay(job_memory="1g")))
    await size_gate.check(plain)
    await size_gate.check(tuned)  # another snapshot: worked out afresh
    assert tuned.size is not None and tuned.size.memory == GIB
    assert plain.size is not None and plain.size.memory != GIB
