"""The daemon's metrics counted from the log's events: errors by kind, and per fleet lease the
acquires found full (the job waits) and the grants that failed open, as the gates log them on a
real Redis (and on none, for the grant that fails open); and the leader's fleet gauges as a
scrape finds them while the leader is still asking Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from dispatch.config.schemas import ConfigSnapshot, Endpoint
from dispatch.daemon.metrics import Metrics
from dispatch.fleet.leases import FleetLeases, LeaseSettings
from dispatch.fleet.slots import Slots
from dispatch.gates.base import ADMIT, Defer
from dispatch.gates.endpoints import EndpointGate
from dispatch.log import event, log
from dispatch.model import Job
from tests.support.leader import RUNS_CAP, hold_spend_read, leader_config
from tests.support.pickups import pickup_of
from tests.support.redis_server import free_port

pytestmark = pytest.mark.anyio

GPU = Endpoint(id="gpu", host="gpu-1.lan", slots=1, models=["qwen"])
CONFIG = ConfigSnapshot(endpoints=(GPU,))


@pytest.fixture
def metrics(monkeypatch: pytest.MonkeyPatch, logged: object) -> Metrics:
    """A daemon's metrics, told of every event as the daemon's assembly has them told."""
    found = Metrics("h1", "0.0.test")
    monkeypatch.setattr(log, "listeners", [found.count_events])
    return found


def count(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_lease_events_count_per_lease_and_errors_per_kind(metrics: Metrics) -> None:
    for job in ("j1", "j2"):
        event("lease_full_deferred", job=job, lease="endpoint:gpu", slots=1)
    event("lease_full_deferred", job="j3", lease="scope:project:web", slots=2)
    event("lease_granted_degraded", job="j4", lease="scope:repo:acme/web")
    event("lease_degraded", error="refused", fail_open=True)  # an error, not a grant
    event("job_deferred", job="j1", reason="endpoint", delay_ms=2000)  # counted elsewhere
    waits = "dispatch_lease_waits_total"
    assert count(metrics, waits, lease="endpoint:gpu") == 2
    assert count(metrics, waits, lease="scope:project:web") == 1
    grants = "dispatch_lease_degraded_grants_total"
    assert count(metrics, grants, lease="scope:repo:acme/web") == 1
    assert count(metrics, grants, lease="endpoint:gpu") is None
    assert count(metrics, "dispatch_errors_total", kind="redis") == 1
    labels = {v for family in metrics.registry.collect() for s in family.samples
              for v in s.labels.values()}  # fmt: skip
    assert not labels & {"j1", "j2", "j3", "j4"}  # never a job id in a label


@pytest.fixture
async def two_hosts(redis: Redis, prefix: str) -> AsyncIterator[tuple[EndpointGate, ...]]:
    """Two daemons' endpoint gates: slots of their own, one Redis's leases."""
    settings = LeaseSettings(prefix=prefix, ttl_s=5.0, timeout_s=1.0)
    async with (
        FleetLeases(redis, settings, host="host-a") as a,
        FleetLeases(redis, settings, host="host-b") as b,
    ):
        yield EndpointGate(Slots(), a), EndpointGate(Slots(), b)


async def test_a_lease_full_fleet_wide_counts_one_wait(metrics: Metrics, two_hosts) -> None:
    a, b = two_hosts
    first = pickup_of(Job(id="j1"), config=CONFIG, model="qwen")
    assert await a.check(first) == ADMIT
    decision = await b.check(pickup_of(Job(id="j2"), config=CONFIG, model="qwen"))
    assert isinstance(decision, Defer) and "fleet-wide" in decision.detail
    await first.release()
    assert count(metrics, "dispatch_lease_waits_total", lease="endpoint:gpu") == 1
    assert count(metrics, "dispatch_lease_degraded_grants_total", lease="endpoint:gpu") is None


async def test_a_grant_with_redis_away_counts_one_degraded_grant(metrics: Metrics) -> None:
    away = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens: refused
    try:
        async with FleetLeases(away, LeaseSettings(timeout_s=1.0), host="host-a") as leases:
            pickup = pickup_of(Job(id="j1"), config=CONFIG, model="qwen")
            assert await EndpointGate(Slots(), leases).check(pickup) == ADMIT
            assert [lease.fence for lease in pickup.leases] == [None]  # failed open
            await pickup.release()
    finally:
        await away.aclose()
    assert count(metrics, "dispatch_lease_degraded_grants_total", lease="endpoint:gpu") == 1
    assert count(metrics, "dispatch_lease_waits_total", lease="endpoint:gpu") is None


def test_an_overdue_trigger_is_one_the_others_zero_and_a_gone_one_is_dropped(
    metrics: Metrics,
) -> None:
    rows = [
        {"id": "nightly", "next": "2026-12-04T00:00:00+00:00", "last": None, "overdue": True},
        {"id": "hourly", "next": None, "last": None, "overdue": False},  # paused: no next
    ]
    metrics.fleet.triggers(rows)
    assert count(metrics, "dispatch_trigger_overdue", trigger="nightly") == 1
    assert count(metrics, "dispatch_trigger_overdue", trigger="hourly") == 0
    assert count(metrics, "dispatch_trigger_next_timestamp_seconds", trigger="hourly") is None
    metrics.fleet.triggers(rows[1:])  # nightly left the file
    assert count(metrics, "dispatch_trigger_overdue", trigger="nightly") is None


async def test_a_scrape_while_the_leader_asks_redis_finds_the_last_round_whole(
    metrics: Metrics, redis: Redis, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = leader_config(tmp_path)

    def whole() -> bool:
        return (
            metrics.registry.get_sample_value("dispatch_spend_cap", RUNS_CAP) == 5
            and count(metrics, "dispatch_trigger_next_timestamp_seconds", trigger="nightly")
            is not None
        )

    await metrics.fleet_step(redis, prefix, "h1", lambda: current)
    assert whole()
    asked, answer = hold_spend_read(monkeypatch)
    step = asyncio.create_task(metrics.fleet_step(redis, prefix, "h1", lambda: current))
    await asyncio.wait_for(asked.wait(), 10)
    assert whole()  # what a scrape reads now: the last round, not a half-cleared one
    answer.set()
    await step
    assert whole()


async def test_a_leader_frozen_past_its_lease_hands_the_fleet_gauges_over(
    redis: Redis, prefix: str, tmp_path: Path
) -> None:
    """Two daemons' metrics on one real Redis. The leader stops stepping (frozen, or killed)
    and its lease lapses, stood for by deleting it now rather than waiting its 30 s: the other
    takes the lead and shows the fleet; the old leader, stepping again, finds the lease not its
    own and shows nothing of the fleet, so one series never comes from two daemons."""
    current = leader_config(tmp_path)
    first, second = Metrics("h1", "0"), Metrics("h2", "0")

    def shows(m: Metrics) -> bool:
        led = m.registry.get_sample_value("dispatch_metrics_leader") == 1
        return led and m.registry.get_sample_value("dispatch_spend_cap", RUNS_CAP) == 5

    await first.fleet_step(redis, prefix, "h1", lambda: current)
    await second.fleet_step(redis, prefix, "h2", lambda: current)
    assert shows(first) and not shows(second)
    assert second.registry.get_sample_value("dispatch_spend_cap", RUNS_CAP) is None

    await redis.delete(f"{prefix}:metrics:leader")  # the frozen leader's lease has run out
    await second.fleet_step(redis, prefix, "h2", lambda: current)
    assert shows(second)
    await first.fleet_step(redis, prefix, "h1", lambda: current)  # the frozen one wakes
    assert not shows(first) and shows(second)
    assert first.registry.get_sample_value("dispatch_spend_cap", RUNS_CAP) is None
