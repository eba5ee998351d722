"""Egress gate: held while the guard reports a problem; else a grant per attempt, revoked with
the pickup's holds, whose rules follow the live config and the job's own narrowing."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.config.schemas import ConfigSnapshot, Endpoint
from dispatch.egress.guard import EgressGuard, GuardSettings
from dispatch.gates.base import ADMIT, EGRESS_DELAY_MS, Defer
from dispatch.gates.egress import EgressGate
from dispatch.model import Job
from dispatch.reasons import EGRESS_UNAVAILABLE
from dispatch.runners.docker import DockerClient
from tests.support.pickups import pickup_of

pytestmark = pytest.mark.anyio

CONFIG = ConfigSnapshot(
    egress=("api.example.com", "*.example.org"),
    endpoints=(Endpoint(id="gpu", host="http://10.0.0.5:8000/v1", slots=1, models=["m1"]),),
)


class _Serving:
    serving = True


@pytest.fixture
async def guard() -> Any:
    async with DockerClient("unix:///nonexistent.sock") as client:
        made = EgressGuard(GuardSettings("net", 0, "h1"), client, lambda: CONFIG)
        yield made


async def test_a_guard_with_a_problem_holds_the_job_egress_unavailable(guard: EgressGuard) -> None:
    guard.problem = "the proxy cannot listen on 172.30.0.1:3128: Address in use"
    pickup = pickup_of(Job(id="j1"))
    decision = await EgressGate(guard).check(pickup)
    assert decision == Defer(EGRESS_DELAY_MS, EGRESS_UNAVAILABLE, detail=guard.problem)
    assert pickup.holds == [] and guard.grants == {}


async def test_an_admitted_job_gets_a_grant_its_holds_give_back(guard: EgressGuard) -> None:
    guard.problem = ""
    guard.proxy = _Serving()  # type: ignore[assignment]
    pickup = pickup_of(Job(id="j1"), model="m1")
    assert await EgressGate(guard).check(pickup) == ADMIT
    grant = guard.grants["j1"]
    assert grant.allowed("api.example.com", 443) and grant.allowed("x.example.org", 80)
    assert grant.allowed("10.0.0.5", 8000)  # the endpoint serving its model
    assert not grant.allowed("evil.example.com", 443)
    await pickup.release()
    assert guard.grants == {}


async def test_a_job_s_egress_narrows_and_never_widens(guard: EgressGuard) -> None:
    guard.problem = ""
    guard.proxy = _Serving()  # type: ignore[assignment]
    job = Job(id="j1", egress=["api.example.com", "elsewhere.net"])
    assert await EgressGate(guard).check(pickup_of(job)) == ADMIT
    grant = guard.grants["j1"]
    assert grant.allowed("api.example.com", 443)
    assert not grant.allowed("x.example.org", 443)  # on the list, not in the job's narrowing
    assert not grant.allowed("elsewhere.net", 443)  # in the narrowing, not on the list


async def test_without_a_guard_the_gate_admits() -> None:
    assert await EgressGate(None).check(pickup_of(Job(id="j1"))) == ADMIT
