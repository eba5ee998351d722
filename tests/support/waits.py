"""A wait gate on a real Redis with a scripted checker, for the wait gate's tests."""

from __future__ import annotations

import asyncio
import random
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import Any

from redis.asyncio import Redis

from dispatch.clock import FakeClock
from dispatch.config.schemas import ConfigSnapshot, WaitProfile
from dispatch.config.settings import Settings
from dispatch.fleet.leases import FleetLeases, LeaseSettings, holders
from dispatch.fleet.slots import Slots
from dispatch.gates.base import Defer
from dispatch.gates.wait.claims import IdentityClaims
from dispatch.gates.wait.gate import CHECK_KEY, WaitGate
from dispatch.gates.wait.parts import WaitParts
from dispatch.gates.wait.profiles import Answer, Verdict
from dispatch.gates.wait.state import WaitStates
from dispatch.model import Job, WaitFor
from dispatch.queue.keys import lease_keys
from tests.support.pickups import pickup_of

CODES: dict[Verdict, int | None] = {"go": 0, "hold": 3, "never": 2, "fault": 1, "aborted": None}
PROFILES = {
    "jira": WaitProfile(command=["check-jira", "{target}"]),
    "ci": WaitProfile(command=["check-ci"]),
}
HOUR = 3600.0


@dataclass
class Scripted:
    """Answers from a script; once it runs out, keeps giving the last answer."""

    verdicts: list[Verdict] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)
    running: int = 0
    most: int = 0

    async def check(self, profile: WaitProfile, target: str, abort: asyncio.Event) -> Answer:
        self.asked.append((profile.command[0], target))
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(0)
            verdict = self.verdicts.pop(0) if len(self.verdicts) > 1 else self.verdicts[0]
        finally:
            self.running -= 1
        return Answer(verdict, f"said {verdict}", CODES[verdict])


@dataclass
class Rig:
    gate: WaitGate
    clock: FakeClock
    checker: Scripted
    slots: Slots
    leases: FleetLeases
    claims: IdentityClaims
    states: WaitStates
    redis: Redis
    prefix: str
    logged: list[tuple[str, dict[str, Any]]]

    async def look(self, job: Job, profiles: dict[str, WaitProfile] | None = None) -> Any:
        config = ConfigSnapshot(profiles=PROFILES if profiles is None else profiles)
        return await self.gate.check(pickup_of(job, config=config))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [fields for event, fields in self.logged if event == name]


def settings(**fields: Any) -> Settings:
    base = Settings(redis_url="", embedded=True, concurrency=3)
    return replace(base, **fields)


async def make_rig(
    stack: AsyncExitStack,
    redis: Redis,
    prefix: str,
    logged: list[tuple[str, dict[str, Any]]],
    host: str = "host-a",
    slots: Slots | None = None,
    **fields: Any,
) -> Rig:
    lease_settings = LeaseSettings(prefix=prefix, ttl_s=5.0, timeout_s=1.0)
    leases = await stack.enter_async_context(FleetLeases(redis, lease_settings, host=host))
    clock, checker, slots = FakeClock(), Scripted(["hold"]), slots or Slots()
    claims, states = IdentityClaims(redis, prefix), WaitStates(redis, prefix)
    parts = WaitParts(states, claims, checker, random.Random(7).random)
    gate = WaitGate(settings(**fields), slots, leases, parts, clock)
    return Rig(gate, clock, checker, slots, leases, claims, states, redis, prefix, logged)


def job(*conditions: WaitFor, id: str = "j1", dedup: str | None = None, **fields: Any) -> Job:
    fields.setdefault("kind", "forge")
    fields.setdefault("repo", "acme/web")
    fields.setdefault("number", 7)
    return Job(id=id, wait_for=list(conditions), dedup=dedup, **fields)


def profile(name: str) -> WaitFor:
    return WaitFor(profile=name)


def step(clock: FakeClock, ms: int) -> None:
    """Exactly `ms` on (advance takes seconds, and a float of them would round down)."""
    clock.advance((ms + 0.5) / 1000)


async def assert_discipline(r: Rig, verdicts: list[Verdict], job_id: str) -> None:
    r.checker.verdicts = [*verdicts, "go"]
    j = job(profile("jira"), profile("ci"), id=job_id, dedup=f"k-{job_id}")
    lease = lease_keys(CHECK_KEY, r.prefix)
    for _ in range(len(verdicts) * 2 + 2):
        decision = await r.look(j)
        assert r.slots.statistics(CHECK_KEY).held == 0
        assert await holders(r.redis, lease) == {}
        if not isinstance(decision, Defer):
            assert await r.claims.holder(f"k-{job_id}") is None, verdicts
            return
        step(r.clock, decision.delay_ms)
    raise AssertionError(f"no ending for {verdicts}")
