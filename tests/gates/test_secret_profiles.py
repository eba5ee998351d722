"""Secret-profile gate: an undeclared profile refuses the job before any hold is taken, unless
on the shared queue another live host declares it (its heartbeat, on a real Redis)."""

from __future__ import annotations

import json

import msgspec
import pytest

from dispatch.clock import FakeClock
from dispatch.config.schemas import ConfigSnapshot, SecretProfile
from dispatch.fleet.hosts import PROFILES_FIELD, DeclaredProfiles
from dispatch.gates.base import ADMIT, Defer, Refuse
from dispatch.gates.secret_profiles import CONFIRM_MS, SecretProfileGate
from dispatch.model import Job, SecretRef
from dispatch.queue import keys
from dispatch.reasons import (
    SECRET_ELSEWHERE_DELAY_MS,
    SECRET_PROFILE_ELSEWHERE,
    SECRET_PROFILE_UNKNOWN,
)
from tests.support.pickups import hold_names, pickup_of

pytestmark = pytest.mark.anyio

DECLARED = ConfigSnapshot(secrets={"vault": SecretProfile(command=["vault-read", "{name}"])})


def job(**refs: str) -> Job:
    return Job(
        id="j",
        command=["true"],
        env={"PLAIN": "x", **{k: SecretRef(secret=v) for k, v in refs.items()}},
    )


async def test_a_job_without_references_or_with_declared_profiles_is_admitted() -> None:
    gate = SecretProfileGate()
    assert await gate.check(pickup_of(job())) == ADMIT
    assert await gate.check(pickup_of(job(A="vault/a", B="vault/b"), config=DECLARED)) == ADMIT


async def test_an_undeclared_profile_is_refused_naming_profiles_not_names() -> None:
    pickup = pickup_of(job(A="vault/a", B="disk/private-name", C="zz/q"), config=DECLARED)
    decision = await SecretProfileGate().check(pickup)
    assert isinstance(decision, Refuse) and decision.reason == SECRET_PROFILE_UNKNOWN
    assert "'disk', 'zz'" in decision.sentence and "private-name" not in decision.sentence
    assert hold_names(pickup) == []


async def test_a_broken_secrets_file_is_named_in_the_sentence() -> None:
    broken = ConfigSnapshot(errors={"secrets.json": "line 3: expected ','"})
    decision = await SecretProfileGate().check(pickup_of(job(A="vault/a"), config=broken))
    assert isinstance(decision, Refuse)
    assert "the file is broken" in decision.sentence and "line 3" in decision.sentence


# -- across a mixed fleet: other hosts' profiles, from their heartbeats (real Redis) ----------


async def beat(redis, prefix: str, host: str, *profiles: str) -> None:
    await redis.sadd(keys.hosts_registry(prefix), host)
    payload = {"host": host, "running": 0, PROFILES_FIELD: list(profiles)}
    await redis.set(keys.host_alive(host, prefix), json.dumps(payload), px=60_000)


def fleet_gate(redis, prefix: str, clock: FakeClock) -> SecretProfileGate:
    return SecretProfileGate(DeclaredProfiles(redis, prefix, "h1", clock, cache_s=0.0), clock)


def on(queue: str) -> Job:
    return msgspec.structs.replace(job(A="vault/a", B="disk/private-name"), queue=queue)


async def test_a_profile_another_live_host_declares_defers_the_job_to_it(redis, prefix) -> None:
    await beat(redis, prefix, "h1")  # this host's own beat names no profile
    await beat(redis, prefix, "h2", "disk", "vault")
    await beat(redis, prefix, "h3", "vault")  # not every profile the job needs
    pickup = pickup_of(on("jobs"))
    decision = await fleet_gate(redis, prefix, FakeClock()).check(pickup)
    assert isinstance(decision, Defer) and decision.reason == SECRET_PROFILE_ELSEWHERE
    assert decision.delay_ms == SECRET_ELSEWHERE_DELAY_MS
    assert "host h2 do" in (decision.detail or "") and "h3" not in (decision.detail or "")
    assert "private-name" not in (decision.detail or "") and hold_names(pickup) == []


async def test_with_no_host_declaring_it_the_job_is_refused_only_30_s_after_the_first_look(
    redis, prefix
) -> None:
    clock = FakeClock()
    gate = fleet_gate(redis, prefix, clock)
    first = await gate.check(pickup_of(on("jobs")))
    assert isinstance(first, Defer) and first.reason == SECRET_PROFILE_ELSEWHERE
    assert first.delay_ms == CONFIRM_MS
    clock.advance(CONFIRM_MS / 1000 - 1)
    assert isinstance(await gate.check(pickup_of(on("jobs"))), Defer)
    clock.advance(1)
    last = await gate.check(pickup_of(on("jobs")))
    assert isinstance(last, Refuse) and last.reason == SECRET_PROFILE_UNKNOWN
    assert "nor does any live host" in last.sentence


async def test_a_host_that_comes_back_between_the_looks_takes_the_job(redis, prefix) -> None:
    clock = FakeClock()
    gate = fleet_gate(redis, prefix, clock)
    assert isinstance(await gate.check(pickup_of(on("jobs"))), Defer)
    await beat(redis, prefix, "h2", "disk", "vault")  # restarted meanwhile
    clock.advance(CONFIRM_MS / 1000 + 1)
    again = await gate.check(pickup_of(on("jobs")))
    assert isinstance(again, Defer) and "host h2 do" in (again.detail or "")


async def test_on_a_host_queue_the_job_is_refused_at_once(redis, prefix) -> None:
    await beat(redis, prefix, "h2", "disk", "vault")
    decision = await fleet_gate(redis, prefix, FakeClock()).check(pickup_of(on("jobs@h1")))
    assert isinstance(decision, Refuse) and decision.reason == SECRET_PROFILE_UNKNOWN
