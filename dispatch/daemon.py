"""Assembles a daemon from settings: Redis clients, runner, processor, worker; runs it on
uvloop until SIGTERM or SIGINT, then shuts down gracefully."""

from __future__ import annotations

import asyncio
import signal

import uvloop

from dispatch.boot import boot
from dispatch.clock import SystemClock
from dispatch.config import Settings
from dispatch.fleet import LiveHosts
from dispatch.gates.budget import HostBudget
from dispatch.gates.pipeline import GateDeps, pipeline
from dispatch.lease import FleetLeases, LeaseSettings
from dispatch.log import event
from dispatch.process_runner import ProcessRunner
from dispatch.processor import Processor, ProcessorSettings
from dispatch.redis_client import redis_client
from dispatch.runner import Runner
from dispatch.runs import RunMirror
from dispatch.slots import Slots
from dispatch.watch import ConfigFiles
from dispatch.worker import Worker


def make_runner(settings: Settings) -> Runner:
    if settings.runner == "process":
        return ProcessRunner()
    from dispatch.docker.setup import docker_runner

    return docker_runner(settings)


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    redis = redis_client(settings.redis_url, socket_timeout=15)
    blocking = redis_client(settings.redis_url, socket_timeout=30)
    runner = make_runner(settings)
    clock = SystemClock()
    config = ConfigFiles(settings.config_dir, clock)
    lease_settings = LeaseSettings(prefix=settings.prefix)
    try:
        async with FleetLeases(redis, lease_settings, host=settings.host, clock=clock) as leases:
            deps = GateDeps(
                settings=settings,
                slots=Slots(),
                leases=leases,
                budget=HostBudget(settings),
                live_hosts=LiveHosts(redis, settings.prefix, clock),
                mirror=RunMirror(redis, settings.prefix),
                clock=clock,
            )
            processor = Processor(
                ProcessorSettings(
                    host=settings.host,
                    output_dir=settings.state_dir / "output",
                    stop_grace_s=settings.stop_grace_s,
                ),
                runner,
                pipeline(deps),
                clock,
                config.current,
                deps.mirror,
            )
            worker = Worker(settings, redis, processor, blocking=blocking)
            await boot(redis, runner, settings.host, settings.prefix)
            await worker.run(stop)
            await _settle(runner)
    finally:
        await redis.aclose()
        await blocking.aclose()


async def _settle(runner: Runner) -> None:
    """Let background container removals finish before the loop closes."""
    settle = getattr(runner, "settle", None)
    if settle is not None:
        await settle()


def run(settings: Settings) -> None:
    event("daemon_starting", host=settings.host, runner=settings.runner)
    uvloop.run(serve(settings))
