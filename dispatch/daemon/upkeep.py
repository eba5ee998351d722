"""Upkeep: what keeps the fleet's shared state honest, on timers.

sweep      per queue, every `DISPATCH_SWEEP_EVERY`: claims whose lock deadline passed go
           back to wait (or fail `stalled` past `DISPATCH_MAX_STALLS`); whoever sweeps
           first does it, so a dead host's jobs come back within lock + one sweep period;
settle     every `DISPATCH_SWEEP_EVERY` too, once per daemon: the spend reservations of
           every queue of the fleet whose claims were gone on two looks in a row are settled
           at their reserved amount (runs lost with their daemon; dispatch/spend/ledger.py);
heartbeat  this host's alive key, one SET with a TIME in the same round trip. It carries the
           running count, slots, version and start (`dispatch status`, `hosts`), the trigger
           fingerprint (the fleet agreement, dispatch/triggers/agreement.py), the clock's
           offset to the server's TIME (dispatch/fleet/skew.py), the runs whose stop did not
           take (`stuck`: `dispatch why`, `doctor`) and the secret profile names (other
           hosts' secret-profile gate), the first running jobs (id, queue, target, since)
           and the memory and CPU promised against the host budget; the beat's instant also
           goes to `hosts_seen`, kept after the host is gone. Other hosts count the key, and
           `dispatch cancel` asks it before it waits for an acknowledgement;
output     at start and then hourly: captured output files last written longer than
           `DISPATCH_OUTPUT_RETENTION` ago are removed, except those of the claims this
           process holds. A live run's file is kept by name, not trusted to a recent mtime: a
           quiet run writes nothing for as long as it likes. Any other file is safe to go:
           the runner writes only while its claim is held here (the boot reaps what a
           predecessor left), and a new run always opens a new name (`output_name`). A prune
           that fails (a file it may not remove, a disk error) is logged and tried again at
           the next period; it never stops the daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from importlib import metadata

from redis.asyncio import Redis

from dispatch.clock import Clock, ServerTime
from dispatch.config.settings import Settings
from dispatch.daemon import outcomes
from dispatch.fleet import drain, skew
from dispatch.fleet.drain import DrainRequest
from dispatch.fleet.hosts import PROFILES_FIELD
from dispatch.log import event
from dispatch.model import encoder
from dispatch.queue import fleet_pause, keys
from dispatch.queue.connect import with_time
from dispatch.queue.transitions import Claim, Queue
from dispatch.runners.output import output_dir, output_name, prune
from dispatch.spend.ledger import SpendLedger

OUTPUT_PRUNE_EVERY_S = 3600.0
BEAT_JOBS = 64  # running jobs named in one beat: a status line, not an inventory


def _version() -> str:
    try:
        return metadata.version("dispatch")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


VERSION = _version()


class Upkeep:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        clock: Clock,
        running: Callable[[], int],
        claims: Callable[[], Iterable[Claim]] = tuple,
        fingerprint: Callable[[], str] | None = None,
        server_time: ServerTime | None = None,
        stuck: Callable[[], list[dict[str, str]]] = list,
        profiles: Callable[[], Iterable[str]] = tuple,
        jobs: Callable[[], list[dict[str, object]]] = list,
        promised: Callable[[], dict[str, float] | None] = lambda: None,
        slots: Callable[[], int] | None = None,
        draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.clock = clock
        self.running = running
        self.claims = claims  # what this process holds now: their runs' output stays
        self.spend = SpendLedger(redis, settings.prefix)
        self.fingerprint = fingerprint
        self.server_time = server_time or ServerTime(clock)
        self.stuck = stuck  # runs whose stop did not take (daemon/lock_keeper.py)
        self.profiles = profiles  # this host's secret profile names (gates/secret_profiles.py)
        self.jobs = jobs  # the running jobs, for `dispatch hosts` (worker.py's beat_jobs)
        self.promised = promised  # memory and CPU reserved against the host budget
        self.slots = slots or (lambda: settings.concurrency)  # live: settings.json may change it
        self.draining = draining
        self.drain_asked: DrainRequest | None = None  # for this daemon's start (fleet/drain.py)
        self.started_ms = clock.now_ms()
        self._beats = 0

    async def sweep(self, queue: Queue) -> list[str]:
        """Sweep one queue; the ids put back in wait."""
        result = outcomes.stalled(self.settings.host, self.clock.now_ms())
        requeued, failed = await queue.sweep(self.settings.max_stalls, encoder.encode(result))
        if requeued or failed:
            event("stalled_jobs_swept", queue=queue.name, requeued=requeued, failed=failed)
        return requeued

    async def settle_lost(self) -> None:
        """Spend reservations whose runs were lost with their daemons, on any queue, are
        settled at their reserved amount (`SpendLedger.settle_lost`)."""
        await self.spend.settle_lost()

    async def farewell(self) -> None:
        """A daemon that stopped cleanly takes its alive key with it: `status` says it is gone
        at once, and `dispatch drain --wait` returns, rather than 3 beats later. Its last beat
        stays in `hosts_seen`."""
        await self.redis.delete(keys.host_alive(self.settings.host, self.settings.prefix))

    async def beat(self, period_s: float) -> None:
        alive = keys.host_alive(self.settings.host, self.settings.prefix)
        beat: dict[str, object] = {
            "host": self.settings.host,
            "running": self.running(),
            "slots": self.slots(),
            "version": VERSION,
            "started_ms": self.started_ms,
        }
        if self.draining():
            beat["draining"] = True
        if self.fingerprint is not None:
            beat["triggers"] = self.fingerprint()
        if self.server_time.offset_ms is None:  # the first beat publishes one too
            await self.server_time.measure(self.redis)
        beat[skew.FIELD] = self.server_time.offset_ms
        if stuck := self.stuck():
            beat["stuck"] = stuck
        if profiles := sorted(self.profiles()):
            beat[PROFILES_FIELD] = profiles
        if jobs := self.jobs()[:BEAT_JOBS]:
            beat["jobs"] = jobs
        if (promised := self.promised()) is not None:
            beat["budget"] = promised
        seen_ms = self.clock.now_ms() + (self.server_time.offset_ms or 0)
        async with self.redis.pipeline(transaction=False) as p:
            p.set(alive, encoder.encode(beat), px=int(period_s * 3000))
            p.hset(keys.hosts_seen(self.settings.prefix), self.settings.host, seen_ms)
            p.get(keys.host_drain(self.settings.host, self.settings.prefix))
            sent = self.clock.now_ms()
            reply, (_, _, asked) = await with_time(self.redis, p)
        self.server_time.note(reply, sent, self.clock.now_ms())
        request = drain.decode(asked)
        if request is not None and request.started_ms == self.started_ms:
            self.drain_asked = request
        # the pause is followed every other beat (an idle daemon stays near one command a
        # second); the first beat, before any claim, also registers the queues
        if self._beats % 2 == 0:
            await fleet_pause.follow(
                self.redis, self.settings.prefix, self.settings.queues, register=self._beats == 0
            )
        self._beats += 1

    async def prune_output(self) -> None:
        """Remove the output files older than the retention, but those of live claims."""
        live = {output_name(c.id, c.attempt, c.token) for c in self.claims()}
        before_ms = self.clock.now_ms() - int(self.settings.output_retention_s * 1000)
        pruned = await asyncio.to_thread(
            prune, output_dir(self.settings.state_dir), before_ms, live
        )
        if pruned.failed:
            event("output_prune_failed", files=pruned.failed, error=pruned.error)
        if pruned.removed:
            event("output_pruned", files=pruned.removed)
