from __future__ import annotations

import pytest

from dispatch.config.schemas import ConfigSnapshot, Endpoint
from dispatch.fleet.leases import holder_host, holders
from dispatch.gates.base import ADMIT, ENDPOINT_DELAY_MS, Defer, Pickup
from dispatch.gates.endpoints import per_machine, serving
from dispatch.model import Job
from dispatch.queue.keys import lease_keys
from tests.support.pickups import hold_names, pickup_of

pytestmark = pytest.mark.anyio

LLM = Endpoint(id="llm", host="gpu-1.lan", slots=1, models=["qwen", "llama"])


def asks(job_id: str, model: str | None = "qwen", endpoints=(LLM,)) -> Pickup:
    config = ConfigSnapshot(endpoints=tuple(endpoints))
    return pickup_of(Job(id=job_id), config=config, model=model)


async def test_a_full_endpoint_defers_the_next_job(hosts) -> None:
    gate = hosts[0].endpoint
    first = asks("job-1")
    assert await gate.check(first) == ADMIT
    assert hold_names(first) == ["slot:endpoint:llm", "lease:endpoint:llm"]
    decision = await gate.check(asks("job-2", model="llama"))
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder, decision.delay_ms) == (
        "endpoint",
        "job-1",
        ENDPOINT_DELAY_MS,
    )
    assert decision.detail == "endpoint llm runs 1 of 1 on this host (held by job-1)"
    await first.release()
    assert await gate.check(asks("job-3")) == ADMIT


async def test_an_endpoint_is_bounded_fleet_wide(hosts) -> None:
    a, b = hosts
    first = asks("job-1")
    assert await a.endpoint.check(first) == ADMIT
    decision = await b.endpoint.check(asks("job-2"))
    assert isinstance(decision, Defer)
    assert (decision.reason, decision.holder) == ("endpoint", "host-a")
    assert decision.detail == "endpoint llm runs 1 of 1 fleet-wide (held by host-a)"
    await first.release()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.2:8080", "http://[::1]:8000/v1"])
async def test_a_per_machine_endpoint_takes_no_fleet_lease(hosts, redis, prefix, host) -> None:
    a, b = hosts
    local = Endpoint(id="ollama", host=host, slots=1, models=["qwen"])
    first, second = asks("job-1", endpoints=[local]), asks("job-2", endpoints=[local])
    assert await a.endpoint.check(first) == ADMIT
    assert hold_names(first) == ["slot:endpoint:ollama"]
    assert await holders(redis, lease_keys("endpoint:ollama", prefix)) == {}
    assert await b.endpoint.check(second) == ADMIT  # the other machine has its own server
    assert isinstance(await a.endpoint.check(asks("job-3", endpoints=[local])), Defer)


async def test_endpoints_are_taken_once_each_in_id_order(hosts, redis, prefix) -> None:
    zeta = Endpoint(id="zeta", host="10.0.0.9", slots=1, models=["qwen"])
    alpha = Endpoint(id="alpha", host="10.0.0.8", slots=1, models=["qwen"])
    unrelated = Endpoint(id="beta", host="10.0.0.7", slots=1, models=["other"])
    # zeta twice: one hold, never waiting on itself
    p = asks("job-1", endpoints=[zeta, unrelated, alpha, zeta])
    assert await hosts[0].endpoint.check(p) == ADMIT
    assert hold_names(p) == [
        "slot:endpoint:alpha",
        "lease:endpoint:alpha",
        "slot:endpoint:zeta",
        "lease:endpoint:zeta",
    ]
    held = await holders(redis, lease_keys("endpoint:zeta", prefix))
    assert [holder_host(h) for h in held] == ["host-a"]
    await p.release()
    assert await holders(redis, lease_keys("endpoint:zeta", prefix)) == {}


async def test_a_busy_second_endpoint_defers_after_the_first_is_held(hosts) -> None:
    one = Endpoint(id="a", host="10.0.0.1", slots=2, models=["qwen"])
    two = Endpoint(id="b", host="10.0.0.2", slots=1, models=["qwen"])
    first = asks("job-1", endpoints=[two])
    assert await hosts[0].endpoint.check(first) == ADMIT
    second = asks("job-2", endpoints=[one, two])
    decision = await hosts[0].endpoint.check(second)
    assert isinstance(decision, Defer) and decision.holder == "job-1"
    assert "endpoint b" in decision.detail
    assert hold_names(second) == ["slot:endpoint:a", "lease:endpoint:a"]  # the processor frees


async def test_no_model_or_an_unserved_model_is_admitted(hosts) -> None:
    for p in (asks("job-1", model=None), asks("job-2", model="mistral")):
        assert await hosts[0].endpoint.check(p) == ADMIT
        assert p.holds == []


async def test_an_endpoint_without_slots_admits_nothing(hosts) -> None:
    closed = Endpoint(id="off", host="10.0.0.1", slots=0, models=["qwen"])
    p = asks("job-1", endpoints=[closed])
    decision = await hosts[0].endpoint.check(p)
    assert isinstance(decision, Defer) and decision.reason == "endpoint"
    assert decision.detail == "endpoint off admits no jobs (concurrent 0)"
    assert p.holds == []


async def test_lease_loss_aborts_the_run(hosts, redis, prefix) -> None:
    a = hosts[0]
    p = asks("job-1")
    assert await a.endpoint.check(p) == ADMIT
    [lease] = a.leases.held()
    await redis.delete(lease_keys("endpoint:llm", prefix).holders)
    assert not await a.leases.renew(lease)
    assert p.signal.reason == "lease-lost"
    await p.release()


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("localhost", True),
        ("LOCALHOST:11434", True),
        ("127.0.0.1", True),
        ("127.8.9.10:80", True),
        ("::1", True),
        ("[::1]:8080", True),
        ("0.0.0.0", True),
        ("::ffff:127.0.0.1", True),
        ("http://localhost:8000/v1", True),
        ("10.0.0.1", False),
        ("gpu-1.lan:8000", False),
        ("https://api.example.com", False),
        ("[::1", False),
    ],
)
def test_per_machine_hosts(host, expected) -> None:
    assert per_machine(host) is expected


def test_serving_dedups_by_id_and_sorts() -> None:
    rows = [
        Endpoint(id="b", host="h", slots=1, models=["m"]),
        Endpoint(id="a", host="h", slots=3, models=["m"]),
        Endpoint(id="a", host="h", slots=9, models=["m"]),
    ]
    assert [(e.id, e.slots) for e in serving(rows, "m")] == [("a", 3), ("b", 1)]
