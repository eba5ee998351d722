"""Builds the egress guard from the daemon's settings, for the daemon's life."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from dispatch.config.schemas import ConfigSnapshot
from dispatch.config.settings import Settings
from dispatch.egress.guard import EgressGuard, GuardSettings
from dispatch.runners.docker.client import DockerClient


@contextlib.asynccontextmanager
async def guarded(
    settings: Settings, config: Callable[[], ConfigSnapshot]
) -> AsyncIterator[EgressGuard | None]:
    """The guard when docker jobs run on dispatch's own network, else None; closed (proxy
    stopped, this daemon's firewall rules removed once its containers are gone) at exit."""
    network = settings.owned_network
    if settings.runner != "docker" or network is None:
        yield None
        return
    client = DockerClient(timeout_s=10)
    guard = EgressGuard(GuardSettings(network, settings.egress_port, settings.host), client, config)
    try:
        yield guard
    finally:
        await guard.close()
        await client.aclose()
