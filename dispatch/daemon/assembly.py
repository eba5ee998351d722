"""Assembles a daemon from settings: Redis clients, runner, processor, worker; runs it on
uvloop until SIGTERM or SIGINT, then shuts down gracefully.

The order matters: the state dir is held (by the CLI, before an embedded Redis starts), then
the host name (`instance.HostOwner`), then the boot reaps and hands back what a predecessor
left (`boot.boot_until_done`, retried until it succeeds), and only then does the worker claim.
The host name is kept until the worker has stopped, and given up last."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from functools import partial

import uvloop
from redis.asyncio import Redis

from dispatch.clock import ServerTime, SystemClock
from dispatch.config.settings import Settings
from dispatch.config.watcher import ConfigFiles
from dispatch.daemon.boot import LeftRecords, boot_until_done, reconcile_every
from dispatch.daemon.engine_wait import EngineWait
from dispatch.daemon.instance import Holder, HostOwner
from dispatch.daemon.metrics import Metrics
from dispatch.daemon.notify import Notifier
from dispatch.daemon.on_failure import OnFailure, Webhook
from dispatch.daemon.processor import Processor, ProcessorSettings
from dispatch.daemon.tasks import OnStop, every, supervised
from dispatch.daemon.worker import Worker
from dispatch.egress.guard import EgressGuard
from dispatch.egress.guarded import guarded
from dispatch.errors import RedisUnavailable
from dispatch.fleet.host_budget import HostBudget
from dispatch.fleet.hosts import DeclaredProfiles, LiveHosts
from dispatch.fleet.leases import FleetLeases, LeaseSettings
from dispatch.fleet.slots import Slots
from dispatch.gates.job_user import RootOwned
from dispatch.gates.pipeline import GateDeps, pipeline
from dispatch.gates.wait.claims import IdentityClaims
from dispatch.gates.wait.parts import WaitParts
from dispatch.gates.wait.profiles import ProfileRunner
from dispatch.gates.wait.state import WaitStates, wait_state_ttl_ms
from dispatch.host.files import allowed_folder
from dispatch.log import event, log
from dispatch.queue.connect import client_like, open_redis
from dispatch.queue.transitions import Queue
from dispatch.reasons import NEWER_RELEASE, PAUSE_WINDOW, SHUTDOWN
from dispatch.records.disk_log import RecordLog
from dispatch.records.mirror import RunMirror
from dispatch.records.tail import Tails
from dispatch.runners.base import Runner
from dispatch.runners.docker.runner import DockerRunner
from dispatch.runners.docker.settings import DockerSettings
from dispatch.runners.docker.user import job_user
from dispatch.runners.output import output_dir
from dispatch.runners.process import ProcessRunner
from dispatch.spend.ledger import SpendLedger
from dispatch.spend.usage_report import usage_root
from dispatch.triggers.minter import Minter

HELD_BY_CONFIG = frozenset({NEWER_RELEASE, PAUSE_WINDOW})


def make_runner(settings: Settings, egress: EgressGuard | None = None) -> Runner:
    if settings.runner == "process":
        return ProcessRunner()
    from dispatch.runners.docker.factory import docker_runner

    return docker_runner(settings, egress.env if egress is not None else None)


def job_user_rule(docker: DockerSettings | None) -> RootOwned | None:
    """The job-user gate's rule for the docker runner's settings; None for another runner
    (`docker` None) and for an explicit DISPATCH_CONTAINER_USER, which decides for every job."""
    if docker is None or docker.user is not None:
        return None
    return partial(_root_owned, roots=docker.allowed_roots)


def _root_owned(folder: str | None, roots: tuple[str, ...]) -> bool:
    """A folder under the roots that belongs to root; outside them, or gone, is the runner's."""
    source = allowed_folder(folder, roots)
    if source is None:
        return False
    try:
        return job_user(source, None) is None
    except OSError:
        return False


async def serve(settings: Settings, holder: Holder, stop: asyncio.Event | None = None) -> None:
    """Run the daemon until `stop` (SIGTERM, SIGINT); `holder` is the state dir's lock holder.

    Raises InstanceTaken when another daemon holds the host name, at start or later."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    redis = await open_redis(settings.redis_url, socket_timeout=15)
    blocking = client_like(redis, settings.redis_url, socket_timeout=30)
    owner = HostOwner(redis, settings, holder)
    try:
        await owner.take()  # before boot: a second daemon must not touch the first one's runs
        event("daemon_starting", host=settings.host, runner=settings.runner)
        await _serve_as_owner(settings, redis, blocking, owner, stop)
    finally:
        await redis.aclose()
        await blocking.aclose()
    if owner.lost:
        raise owner.taken_over()


async def _serve_as_owner(
    settings: Settings, redis: Redis, blocking: Redis, owner: HostOwner, stop: asyncio.Event
) -> None:
    config = ConfigFiles(settings.config_dir, SystemClock())
    queues = [Queue(redis, name, settings.prefix) for name in settings.queues]
    async with (
        guarded(settings, config.current) as egress,
        gated_processor(
            settings, redis, make_runner(settings, egress), config, egress
        ) as processor,
    ):
        runner = processor.runner
        metrics = _metrics(settings)
        server_time = ServerTime(SystemClock())  # measured by the heartbeat, read by the minter
        minter = Minter(settings, redis, SystemClock(), config.current, server_time)
        worker = Worker(
            settings,
            redis,
            processor,
            blocking=blocking,
            records=processor.local_log,
            minter=minter,
            server_time=server_time,
            profiles=lambda: config.current().secrets,
            metrics=metrics,
            on_failure=_on_failure(settings, redis),
        )
        left = _left_records(processor)
        async with _owned(owner, worker, stop), _serving(metrics, settings):
            # nothing is claimed before the runs a predecessor left are known gone
            if await boot_until_done(
                redis, runner, settings.host, settings.prefix, queues, stop, left=left
            ):
                await _work(settings, worker, runner, config, queues, stop, egress)


def _on_failure(settings: Settings, redis: Redis) -> OnFailure | None:
    if not settings.on_failure and not settings.webhook_url:
        return None
    hook = Webhook(settings.webhook_url, settings.webhook_secret) if settings.webhook_url else None
    return OnFailure(
        redis,
        settings.prefix,
        settings.host,
        settings.on_failure,
        settings.on_failure_timeout_s,
        hook,
    )


def _metrics(settings: Settings) -> Metrics | None:
    if settings.metrics_addr is None:
        return None
    from dispatch.daemon.upkeep import VERSION

    return Metrics(settings.host, VERSION)


@contextlib.asynccontextmanager
async def _serving(metrics: Metrics | None, settings: Settings) -> AsyncIterator[None]:
    """/metrics for the block, and the log's error and lease events counted into it."""
    if metrics is None or settings.metrics_addr is None:
        yield
        return
    stop = metrics.serve(*settings.metrics_addr)
    event("metrics_serving", addr=f"{settings.metrics_addr[0]}:{settings.metrics_addr[1]}")
    log.listeners.append(metrics.count_events)
    try:
        yield
    finally:
        log.listeners.remove(metrics.count_events)
        stop()


def _left_records(processor: Processor) -> LeftRecords | None:
    if processor.local_log is None or processor.mirror is None:
        return None
    return LeftRecords(processor.local_log, processor.mirror)


@contextlib.asynccontextmanager
async def _owned(owner: HostOwner, worker: Worker, stop: asyncio.Event) -> AsyncIterator[None]:
    """Keep the host name for the block; if another daemon takes it over, stop at once."""

    def lost() -> None:
        worker.abort_all(SHUTDOWN)  # their claims were handed back: no grace to wait out
        stop.set()

    done = asyncio.Event()
    keeper = asyncio.create_task(
        supervised("host-name", lambda: owner.keep(done, lost), OnStop(done))
    )
    try:
        yield
    finally:
        done.set()
        await keeper
        await owner.release()


async def _work(
    settings: Settings,
    worker: Worker,
    runner: Runner,
    config: ConfigFiles,
    queues: list[Queue],
    stop: asyncio.Event,
    egress: EgressGuard | None = None,
) -> None:
    if egress is not None:
        await egress.refresh()  # before the first claim, so no job waits on the first look
    keeper = None
    if egress is not None:
        keeper = asyncio.create_task(supervised("egress", lambda: egress.keep(stop), OnStop(stop)))
    follower = asyncio.create_task(
        follow_config(config, queues, stop, worker.notifier, worker.follow_slots)
    )
    reconciler = asyncio.create_task(
        reconcile_every(settings.reconcile_s, stop, runner, settings.host, queues, worker.held)
    )
    await worker.run(stop)
    await follower
    await reconciler
    if keeper is not None:
        await keeper
    await runner.settle()  # background removals finish before the loop closes


@contextlib.asynccontextmanager
async def gated_processor(
    settings: Settings,
    redis: Redis,
    runner: Runner,
    config: ConfigFiles,
    egress: EgressGuard | None = None,
) -> AsyncIterator[Processor]:
    """The processor with every gate, sharing one set of slots, one budget and the leases."""
    clock = SystemClock()
    lease_settings = LeaseSettings(prefix=settings.prefix, ttl_s=settings.lease_ttl_s)
    spend = SpendLedger(redis, settings.prefix)
    async with FleetLeases(redis, lease_settings, host=settings.host, clock=clock) as leases:
        deps = GateDeps(
            settings=settings,
            slots=Slots(),
            leases=leases,
            budget=HostBudget(settings),
            live_hosts=LiveHosts(redis, settings.prefix, clock),
            mirror=RunMirror(redis, settings.prefix),
            clock=clock,
            root_owned=job_user_rule(runner.settings if isinstance(runner, DockerRunner) else None),
            waits=wait_parts(settings, redis),
            spend=spend,
            egress=egress,
            profiles=DeclaredProfiles(redis, settings.prefix, settings.host, clock),
        )
        records = RecordLog(settings.state_dir)
        processor = Processor(
            ProcessorSettings(
                host=settings.host,
                output_dir=output_dir(settings.state_dir),
                stop_grace_s=settings.stop_grace_s,
                usage_dir=usage_root(settings.state_dir),
            ),
            runner,
            pipeline(deps),
            clock,
            config.current,
            deps.mirror,
            EngineWait(redis, settings.prefix, settings.engine_wait_ms, clock),
            records,
            Tails(redis, settings.prefix, settings.log_tail_bytes, settings.log_tail_ttl_s),
        )
        processor.host_budget = deps.budget
        try:
            yield processor
        finally:
            processor.close()
            records.close()
            await spend.drain()  # settles still on their way; the sweep takes the rest


def wait_parts(settings: Settings, redis: Redis) -> WaitParts:
    """The wait gate's Redis state, identity claims and profile runner."""
    return WaitParts(
        WaitStates(redis, settings.prefix, wait_state_ttl_ms(settings)),
        IdentityClaims(redis, settings.prefix),
        ProfileRunner(),
    )


async def follow_config(
    config: ConfigFiles,
    queues: list[Queue],
    stop: asyncio.Event,
    notifier: Notifier | None = None,
    applied: Callable[[], None] = lambda: None,
    every_s: float = 1.0,
) -> None:
    """When the config files change, what reads them live takes the new copy (`applied`: the
    host's slots), and jobs they held are checked again at once, rather than at their re-check
    time (10 minutes for newer-release, a window's old end for pause-window); systemd is told
    RELOADING, then READY once that is done."""
    last = config.current()
    notifier = notifier or Notifier({})

    async def step() -> None:
        nonlocal last
        current = config.current()
        if current is not last:
            last = current
            notifier.reloading()
            applied()
            await recheck_held(queues)
            notifier.ready()

    await every("config", every_s, step, OnStop(stop), jitter=False)


async def recheck_held(queues: list[Queue]) -> None:
    """Make due at once the delayed jobs of each queue that the config held."""
    for queue in queues:
        try:
            ids = await queue.delayed_for(HELD_BY_CONFIG)
            await queue.make_due(ids)
        except RedisUnavailable as exc:  # Queue translates its faults
            event("config_recheck_failed", queue=queue.name, error=str(exc))
            continue
        if ids:
            event("config_recheck", queue=queue.name, jobs=len(ids))


def run(settings: Settings, holder: Holder) -> None:
    """Serve on uvloop; the caller holds the state dir (`instance.hold_state_dir`)."""
    uvloop.run(serve(settings, holder))
