"""Two hosts' worth of scope and endpoint gates on one Redis, for the fleet-bound tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from dispatch.fleet.leases import FleetLeases, LeaseSettings
from dispatch.fleet.slots import Slots
from dispatch.gates.endpoints import EndpointGate
from dispatch.gates.scope import ScopeGate


@dataclass
class Host:
    """One daemon's worth of gates: its own slots, its own leases, one shared Redis."""

    slots: Slots
    leases: FleetLeases
    scope: ScopeGate
    endpoint: EndpointGate


async def open_host(stack: AsyncExitStack, redis: Redis, prefix: str, name: str) -> Host:
    settings = LeaseSettings(prefix=prefix, ttl_s=5.0, timeout_s=1.0)
    leases = await stack.enter_async_context(FleetLeases(redis, settings, host=name))
    slots = Slots()
    return Host(slots, leases, ScopeGate(slots, leases), EndpointGate(slots, leases))


@pytest.fixture
async def hosts(redis: Redis, prefix: str) -> AsyncIterator[list[Host]]:
    async with AsyncExitStack() as stack:
        yield [await open_host(stack, redis, prefix, name) for name in ("host-a", "host-b")]
