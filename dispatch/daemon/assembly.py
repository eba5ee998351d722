"""Assembles a daemon from settings: Redis clients, runner, processor, worker; runs it on
uvloop until SIGTERM or SIGINT, then shuts down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator

import uvloop
from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.clock import SystemClock
from dispatch.config.settings import Settings
from dispatch.config.watcher import ConfigFiles
from dispatch.daemon.boot import boot
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.daemon.worker import Worker
from dispatch.fleet.hosts import LiveHosts
from dispatch.fleet.leases import FleetLeases, LeaseSettings
from dispatch.fleet.slots import Slots
from dispatch.gates.host_budget import HostBudget
from dispatch.gates.pipeline import GateDeps, pipeline
from dispatch.log import event
from dispatch.queue.connect import redis_client
from dispatch.queue.transitions import Queue
from dispatch.reasons import NEWER_RELEASE, PAUSE_WINDOW
from dispatch.records.mirror import RunMirror
from dispatch.runners.base import Runner
from dispatch.runners.process import ProcessRunner

HELD_BY_CONFIG = frozenset({NEWER_RELEASE, PAUSE_WINDOW})


def make_runner(settings: Settings) -> Runner:
    if settings.runner == "process":
        return ProcessRunner()
    from dispatch.runners.docker.setup import docker_runner

    return docker_runner(settings)


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    redis = redis_client(settings.redis_url, socket_timeout=15)
    blocking = redis_client(settings.redis_url, socket_timeout=30)
    runner = make_runner(settings)
    config = ConfigFiles(settings.config_dir, SystemClock())
    try:
        async with gated_processor(settings, redis, runner, config) as processor:
            worker = Worker(settings, redis, processor, blocking=blocking)
            await boot(redis, runner, settings.host, settings.prefix)
            queues = [Queue(redis, name, settings.prefix) for name in settings.queues]
            follower = asyncio.create_task(follow_config(config, queues, stop))
            await worker.run(stop)
            await follower
            await runner.settle()  # background removals finish before the loop closes
    finally:
        await redis.aclose()
        await blocking.aclose()


@contextlib.asynccontextmanager
async def gated_processor(
    settings: Settings, redis: Redis, runner: Runner, config: ConfigFiles
) -> AsyncIterator[Processor]:
    """The processor with every gate, sharing one set of slots, one budget and the leases."""
    clock = SystemClock()
    lease_settings = LeaseSettings(prefix=settings.prefix, ttl_s=settings.lease_ttl_s)
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
        yield Processor(
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


async def follow_config(
    config: ConfigFiles, queues: list[Queue], stop: asyncio.Event, every_s: float = 1.0
) -> None:
    """When the config files change, jobs they held are checked again at once, rather than at
    their re-check time (10 minutes for newer-release, a window's old end for pause-window)."""
    last = config.current()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        current = config.current()
        if current is last:
            continue
        last = current
        for queue in queues:
            try:
                ids = await queue.delayed_for(HELD_BY_CONFIG)
                await queue.make_due(ids)
            except RedisError as exc:
                event("config_recheck_failed", queue=queue.name, error=str(exc))
                continue
            if ids:
                event("config_recheck", queue=queue.name, jobs=len(ids))


def run(settings: Settings) -> None:
    event("daemon_starting", host=settings.host, runner=settings.runner)
    uvloop.run(serve(settings))
