"""The worker: one asyncio loop that claims, runs and finishes jobs from this host's queues.

It is assembled from small parts, each testable alone with the injected clock:
  `lane.Lane`              per queue: claim (pump, marker watcher), and its finishes
                           (`flights.Flights`: the flusher and the flights it sends);
  `lock_keeper.LockKeeper` renews every claim, delivers cancel requests, and stops a run
                           before its claim can lapse;
  `upkeep.Upkeep`          stall sweeps per queue, the heartbeat, output pruning;
  `triggers.minter.Minter` mints cron triggers' occurrences ahead (once before the first claim);
  `capacity.Capacity`      how many more jobs this host may take;
  `ahead.Ahead`            claims beyond the run slots, waiting for a run to end.
Every loop runs supervised (`tasks.py`): an exception is logged and the loop restarted with
backoff; nothing ends silently, nothing cancels the daemon. The worker itself only starts a
task per claimed job (the processor's pickup) and turns its ending into a finish; a run that
ends while a claim waits for its slot hands that slot on within the same task (`_run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from functools import partial
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.clock import Clock, ServerTime, SystemClock
from dispatch.config.settings import Settings
from dispatch.daemon.ahead import Ahead
from dispatch.daemon.capacity import Capacity
from dispatch.daemon.lane import Lane, Timing
from dispatch.daemon.lock_keeper import LockKeeper, Running
from dispatch.daemon.metrics import FLEET_EVERY_S, LAG_EVERY_S, Metrics
from dispatch.daemon.notify import Notifier, Watchdog
from dispatch.daemon.on_failure import OnFailure
from dispatch.daemon.processor import Ending, Processor
from dispatch.daemon.tasks import Lifecycle, every, supervised
from dispatch.daemon.upkeep import BEAT_JOBS, OUTPUT_PRUNE_EVERY_S, Upkeep
from dispatch.errors import RedisUnavailable
from dispatch.fleet import drain
from dispatch.gates.wait.state import WaitStates
from dispatch.log import event
from dispatch.model import AtStart, DeferRecord, target_text
from dispatch.queue import keys
from dispatch.queue.faults import redis_call
from dispatch.queue.scripts import load_all
from dispatch.queue.transitions import Claim, Finish, Queue
from dispatch.reasons import LOCK_LOST, SHUTDOWN
from dispatch.records.disk_log import RecordLog, encode
from dispatch.triggers.minter import Minter

__all__ = ["Running", "Timing", "Worker"]

FLUSH_AT_SHUTDOWN_S = 10.0
START_RETRY_S = 0.5
MAX_START_RETRY_S = 15.0
FAREWELL_S = 2.0  # the last beat's removal, bounded: a frozen Redis must not hold up the exit
UNSTOPPED_SLACK_S = 15.0  # past the stop grace, how long shutdown waits for runs to be gone


class Worker:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        processor: Processor,
        *,
        blocking: Redis | None = None,
        timing: Timing | None = None,
        clock: Clock | None = None,
        records: RecordLog | None = None,
        minter: Minter | None = None,
        server_time: ServerTime | None = None,
        profiles: Callable[[], Iterable[str]] = tuple,
        metrics: Metrics | None = None,
        on_failure: OnFailure | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.notifier = notifier or Notifier()
        self.minter = minter
        self.metrics = metrics
        self.on_failure = on_failure
        if metrics is not None:
            metrics.running.set_function(lambda: len(self.running))
            metrics.slots.set_function(lambda: self.capacity.slots)
            metrics.claims_limit.set_function(lambda: self.capacity.claims)
            metrics.claims_waiting.set_function(lambda: len(self.ahead))
        self.redis = redis
        self.processor = processor
        self.timing = timing or Timing()
        self.clock = clock or SystemClock()
        self.records = records or RecordLog(settings.state_dir)
        self.life = Lifecycle()
        self.capacity = Capacity(self.live_slots(), self.timing.batch)
        self.ahead = Ahead(self.capacity, self.clock, self._hand_back)
        self.running: dict[tuple[str, str], Running] = {}
        self.idle = asyncio.Event()
        self.idle.set()
        self.lanes = {
            name: self._lane(Queue(redis, name, settings.prefix), blocking or redis)
            for name in settings.queues
        }
        queues = {name: lane.queue for name, lane in self.lanes.items()}
        self.locks = LockKeeper(
            settings,
            redis,
            queues,
            self.running,
            self.clock,
            processor.runner,
            self.timing.stop_slack_s,
        )
        self.upkeep = Upkeep(
            settings,
            redis,
            self.clock,
            lambda: len(self.running),
            lambda: [entry.claim for entry in self.running.values()],
            minter.fingerprint if minter else None,
            server_time,
            self.locks.stuck,
            profiles,
            self.beat_jobs,
            self.promised,
            lambda: self.capacity.slots,
            lambda: self.life.draining,
        )
        self.drain_grace_s: float | None = None  # asked by `dispatch drain`: its grace
        self._stop: asyncio.Event | None = None
        processor.at_start = self.at_start
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # asking costs a getpid() on 3.11

    def _lane(self, queue: Queue, blocking: Redis) -> Lane:
        states = WaitStates(self.redis, self.settings.prefix)
        return Lane(
            queue,
            self.settings,
            self.timing,
            self.capacity,
            self.life,
            self.clock,
            self.records,
            blocking,
            self._start,
            forget=states.forget,
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then shut down gracefully."""
        self._loop = asyncio.get_running_loop()
        self._stop = stop
        if not await self._start_serving(stop):
            return
        # What start-up made (modules, settings, scripts) lives as long as the process: out of
        # the collector's sight, a full collection no longer walks it (about a tenth of a busy
        # daemon's time went to the collector before).
        gc.freeze()
        event(
            "worker_started",
            host=self.settings.host,
            queues=list(self.lanes),
            concurrency=self.capacity.slots,
        )
        background = [asyncio.create_task(loop) for loop in self._loops()]
        self.notifier.ready(self.status_line())  # boot is done and the claim loops are started
        await stop.wait()
        await self.shutdown()
        await self._close(background)
        if self.on_failure is not None:
            await self.on_failure.settle()
        self.records.close()
        with contextlib.suppress(RedisError, OSError):  # both expire on their own too
            await asyncio.wait_for(self._farewell(), FAREWELL_S)
        event("worker_stopped", host=self.settings.host, drained=self.drain_grace_s is not None)

    async def _farewell(self) -> None:
        await self.upkeep.farewell()
        if self.drain_grace_s is not None:
            await drain.done(self.redis, self.settings.prefix, self.settings.host)

    async def _start_serving(self, stop: asyncio.Event) -> bool:
        """Load the scripts, beat once (which follows the fleet's pause) and register, retried
        with backoff while Redis fails: a fault at start does not end the daemon. False when
        stopped first."""
        backoff = START_RETRY_S
        while not stop.is_set():
            try:
                with redis_call("start"):
                    await load_all(self.redis)
                    await self.upkeep.beat(self.timing.heartbeat_s)
                    await self.redis.sadd(
                        keys.hosts_registry(self.settings.prefix), self.settings.host
                    )
                await self._mint_first()
                return True
            except RedisUnavailable as exc:
                event("start_retry", error=str(exc) or type(exc).__name__, in_s=backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, MAX_START_RETRY_S)
        return False

    async def _mint_first(self) -> None:
        """Before any claim: after downtime the catch-up policy must see the missed
        occurrences before a claim starts them. A failure is logged; the loop tries again."""
        if self.minter is None:
            return
        try:
            await self.minter.tick()
        except Exception as exc:
            event("step_failed", task="triggers", error=f"{type(exc).__name__}: {exc}")

    def _metrics_loops(self, metrics: Metrics) -> list[Coroutine[Any, Any, None]]:
        async def lag() -> None:
            metrics.lag_step()

        def fleet() -> Awaitable[None]:
            redis, s = self.redis, self.settings
            return metrics.fleet_step(redis, s.prefix, s.host, self.processor.config)

        return [
            every("metrics-lag", LAG_EVERY_S, lag, self.life, at_start=True, jitter=False),
            every("metrics-fleet", FLEET_EVERY_S, fleet, self.life, at_start=True),
        ]

    def _loops(self) -> list[Coroutine[Any, Any, None]]:
        life = self.life
        loops = [
            every("renew", self.settings.renew_s, self.locks.tick, life),
            # apart from the renewals: a hung Redis call here must never delay a lock's judgement
            every("recover", self.settings.renew_s, self._recover, life),
            every("heartbeat", self.timing.heartbeat_s, self._beat, life),
            every(
                "prune-output", OUTPUT_PRUNE_EVERY_S, self.upkeep.prune_output, life, at_start=True
            ),
            # once per daemon, not per lane: its two looks must be a sweep period apart
            every("settle-lost", self.settings.sweep_s, self.upkeep.settle_lost, life),
        ]
        if self.minter is not None:
            loops.append(every("triggers", self.settings.trigger_every_s, self.minter.tick, life))
        if self.notifier.watchdog_s is not None:
            watchdog = Watchdog(
                self.notifier, lambda: self.locks.ticked_at, self.settings.renew_s,
                self.clock.monotonic,
            )  # fmt: skip
            loops.append(watchdog.run(life.stopping))
        if self.metrics is not None:
            loops += self._metrics_loops(self.metrics)
        for name, lane in self.lanes.items():
            loops += [
                supervised(f"pump:{name}", lane.pump, life),
                supervised(f"watch:{name}", lane.watch, life),
                supervised(f"flush:{name}", lane.flights.flusher, life),
                every(
                    f"sweep:{name}",
                    self.settings.sweep_s,
                    partial(self._sweep, lane),
                    life,
                    at_start=True,
                ),
            ]
        return loops

    def live_slots(self) -> int:
        """This host's job slots as the config says now (settings.json's `concurrency`)."""
        overlay = self.processor.config().overlay
        return overlay.slots_for(self.settings.host, self.settings.concurrency)

    def follow_slots(self) -> None:
        """After a config reload (assembly.follow_config): a change of this host's slots
        applies at once; more are claimed into now, fewer let the running jobs finish and
        claim nothing until below the new count."""
        slots = self.live_slots()
        if slots != self.capacity.slots:
            event("concurrency_changed", host=self.settings.host, before=self.capacity.slots,
                  after=slots, running=len(self.running))  # fmt: skip
            self.capacity.resize(slots)
            self._begin_waiting()
            for lane in self.lanes.values():
                lane.wake.set()

    async def _beat(self) -> None:
        await self.upkeep.beat(self.timing.heartbeat_s)
        asked = self.upkeep.drain_asked
        if asked is not None and self.drain_grace_s is None and self._stop is not None:
            self.drain_grace_s = asked.grace_s
            event("drain_requested", by=asked.by, grace_s=asked.grace_s, running=len(self.running))
            self._stop.set()  # run() drains as a SIGTERM would, with the request's grace
        self.notifier.status(self.status_line())

    def status_line(self) -> str:
        """What systemd shows of this daemon (`systemctl status`), one line."""
        running = len(self.running)
        if self.life.draining:
            return f"draining: {running} running"
        return f"{running}/{self.capacity.slots} slots"

    async def _recover(self) -> None:
        for lane in self.lanes.values():
            await lane.recover(self.held())

    async def _sweep(self, lane: Lane) -> None:
        if await self.upkeep.sweep(lane.queue):
            lane.poke()

    async def _close(self, background: list[asyncio.Task[Any]]) -> None:
        """Let every loop return on its own: cancelling a Redis call mid-flight can leave a
        connection half-read (and the cancellation swallowed), so cancel only stragglers."""
        self.life.close()
        self.capacity.room.set()
        for lane in self.lanes.values():
            lane.flights.flush_now.set()
            lane.wake.set()
            with contextlib.suppress(RedisUnavailable):
                await lane.queue.wake()  # returns our own watcher from BZPOPMIN at once
        _, hung = await asyncio.wait(background, timeout=self.timing.block_s + 2.0)
        for task in hung:
            task.cancel()
        if hung:
            event("worker_tasks_hung", tasks=len(hung))

    async def shutdown(self) -> None:
        """Stop claiming; let running jobs finish within the grace, then abort them; hand the
        finishes to Redis while it answers."""
        self.life.draining = True
        self.notifier.stopping(self.status_line())
        self.capacity.room.set()  # let the watchers see the drain
        for lane in self.lanes.values():
            lane.wake.set()
            lane.begin_held()  # claimed: they run (or are handed back) like the others
        await self.ahead.hand_back_all()  # what is over the slots runs nothing now
        grace_s = self.drain_grace_s or self.settings.shutdown_grace_s
        event("worker_draining", running=len(self.running), grace_s=grace_s)
        if not await self._idle_within(grace_s):
            for entry in self.running.values():
                entry.signal.abort(SHUTDOWN)
            if not await self._idle_within(self.settings.stop_grace_s + UNSTOPPED_SLACK_S):
                # Their claims lapse; the next boot of this host reaps what is left.
                event("shutdown_runs_unconfirmed", jobs=[k[1] for k in self.running])
        await self._flush_all()

    async def _idle_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self.idle.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _flush_all(self) -> None:
        deadline = self.clock.monotonic() + FLUSH_AT_SHUTDOWN_S
        for lane in self.lanes.values():
            flights = lane.flights
            await flights.landed(FLUSH_AT_SHUTDOWN_S)
            while flights.pending and self.clock.monotonic() < deadline:
                await flights.flush()
            if flights.pending:  # their locks lapse and the sweeper puts them back
                event("finish_abandoned", queue=lane.name, jobs=len(flights.pending))
        await self.ahead.hand_back_all()  # claimed by flights that were in the air

    def held(self) -> set[tuple[str, str]]:
        """(job id, lock token) of every claim this process runs, or holds to run, now."""
        return {(e.claim.id, e.claim.token) for e in self.running.values()} | self.ahead.pairs()

    async def _hand_back(self, claims: list[Claim]) -> None:
        """Claims that waited for a slot in vain go back to the heads of their queues."""
        for name in sorted({claim.queue for claim in claims}):
            lane = self.lanes[name]
            pairs = [(c.id, c.token) for c in claims if c.queue == name]
            lane.live -= len(pairs)
            try:
                handed, recorded = await lane.queue.hand_back(pairs)
            except RedisUnavailable as exc:
                lane.unsure = True  # recover hands them back: nobody here runs them
                event("redis_error", during="hand_back", error=str(exc))
                continue
            event("waiting_claims_handed_back", queue=name, jobs=handed, recorded=recorded)
            if self.metrics is not None:
                self.metrics.handed_back.labels(name).inc(len(handed))

    def abort_all(self, reason: str) -> None:
        """Abort every run now, without the shutdown's grace."""
        for entry in self.running.values():
            entry.signal.abort(reason)

    def beat_jobs(self) -> list[dict[str, object]]:
        """The running jobs as the heartbeat names them, oldest claim first."""
        entries = sorted(self.running.values(), key=lambda e: e.claimed_ms)[:BEAT_JOBS]
        return [
            {"id": e.claim.id, "queue": e.claim.queue, "target": _target(e.claim.data),
             "since_ms": e.claimed_ms}
            for e in entries
        ]  # fmt: skip

    def at_start(self) -> AtStart:
        """This host as a run admitted now finds it (the run is counted as running)."""
        budget = self.processor.host_budget
        used = budget.used() if budget is not None else None
        return AtStart(
            running=len(self.running),
            slots=self.capacity.slots,
            memory=used.memory if used else 0,
            memory_limit=budget.memory if budget else 0,
            cpus=used.cpus if used else 0.0,
            cpus_limit=budget.cpus if budget else 0.0,
        )

    def promised(self) -> dict[str, float] | None:
        """The heartbeat's budget: what a run admitted now would record (`at_start`)."""
        if self.processor.host_budget is None:
            return None
        now = self.at_start()
        return {"memory": now.memory, "memory_limit": now.memory_limit, "cpus": now.cpus,
                "cpus_limit": now.cpus_limit}  # fmt: skip

    # -- running ---------------------------------------------------------------------------

    def _start(self, claim: Claim, sent: float) -> None:
        if len(self.running) < self.capacity.slots:
            self._begin(claim, sent)
        elif self.capacity.ahead:  # claimed ahead: waits for a run to end
            self.ahead.hold(claim, sent)
        else:  # reserved before the host stopped claiming ahead (or lost slots): not its now
            self.ahead.give_back([claim])

    def _begin_waiting(self) -> None:
        """Claims that wait for a slot begin while there is one, each in a task of its own."""
        while (waiting := self._waiting_for_slot()) is not None:
            self._begin(*waiting)

    def _waiting_for_slot(self) -> tuple[Claim, float] | None:
        """The longest-waiting claim, when a slot is free for it (none once draining)."""
        if self.ahead and len(self.running) < self.capacity.slots and not self.life.draining:
            return self.ahead.next()
        return None

    def _hand_on_slot(self) -> Running | None:
        """The oldest waiting claim, begun in the slot a run just freed for that run's task to
        run next; any other free slots (a resize freed more) begin theirs in tasks of their own."""
        waiting = self._waiting_for_slot()
        following = self._enter(*waiting) if waiting is not None else None
        self._begin_waiting()
        return following

    def _begin(self, claim: Claim, sent: float) -> None:
        entry = self._enter(claim, sent)
        loop = self._loop or asyncio.get_running_loop()
        task = loop.create_task(self._run(entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _enter(self, claim: Claim, sent: float) -> Running:
        """The claim among this host's runs, its lock judged: begun, its task to come."""
        # A lock judged from the claim's send: one that lapsed before the reply was read is
        # stopped here, before its run can start (the processor then hands it back).
        now = self.clock.monotonic()
        entry = Running(claim, renewed_at=sent, claimed_ms=self.clock.now_ms(), begun_at=now)
        if self.metrics is not None:
            self.metrics.claimed.labels(claim.queue).inc()
        self.locks.judge_one(entry)
        entry.signal.judged_by(partial(self.locks.judge_one, entry))
        old = self.running.get((claim.queue, claim.id))
        if old is not None:  # claimed again after a sweep: the old claim is lost for good
            old.signal.abort(LOCK_LOST, urgent=True)
        self.running[(claim.queue, claim.id)] = entry
        self.idle.clear()
        return entry

    async def _run(self, entry: Running) -> None:
        """The claim's run; then, while a claim waits for the slot a run freed, that one's in
        the same task: a slot kept busy by claims held ahead costs no new task and no loop turn
        a run (about a tenth of a gated no-op job's CPU at c10, bench/results/issue-31-round-7)."""
        following: Running | None = entry
        while following is not None:
            following = await self._run_one(following)

    async def _run_one(self, entry: Running) -> Running | None:
        """One run to its finish; the claim begun in its slot, for this task to run next."""
        claim = entry.claim
        try:
            ending = await self.processor.process(claim, entry.signal)
        except Exception as exc:
            event("job_crashed", job=claim.id, error=f"{type(exc).__name__}: {exc}")
            ending = self.processor.crashed(claim, exc)
        if self.running.get((claim.queue, claim.id)) is entry:  # not a newer claim's
            del self.running[(claim.queue, claim.id)]
        self.capacity.ran(self.clock.monotonic() - entry.begun_at)
        following = self._hand_on_slot() if self.ahead else None
        try:
            if self.metrics is not None:
                self.metrics.ended(ending.action, ending.record, _defer_reason(ending))
            if self.on_failure is not None:
                self.on_failure.ended(ending.action, ending.record or ending.settled)
            self._end(claim, ending)
        except Exception as exc:  # a bug here must not take the idle flag or a slot with it
            event("job_end_failed", job=claim.id, error=f"{type(exc).__name__}: {exc}")
            self.capacity.give(1)
        if not self.running:
            self.idle.set()
        return following

    def _end(self, claim: Claim, ending: Ending) -> None:
        record = ending.record
        run_json = (ending.encoded or encode(record)) if record else b""
        finish = Finish(
            ending.action,
            claim.id,
            claim.token,
            ending.payload,
            ending.delay_ms,
            record.run_id if record else "",
            run_json,  # the finish stores it in the same atomic step, fenced by the claim
            ending.cancelled,
        )
        local_copy = None if ending.logged or not run_json else run_json  # on disk once
        waited = ending.waited and ending.action == "finish"
        # its slot goes with the ending, to the next claim
        self.lanes[claim.queue].end(finish, local_copy, waited=waited)


def _defer_reason(ending: Ending) -> str:
    """A deferral's or retry's reason, for the metrics: the defer record's, else the run's."""
    if ending.action == "finish":
        return ""
    if ending.record is not None:
        return ending.record.reason
    try:
        return msgspec.json.decode(ending.payload, type=DeferRecord).reason
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "unreadable"


class _Target(msgspec.Struct):
    """The fields of a job document its target is made of (model.target_text)."""

    kind: str = ""
    repo: str | None = None
    number: int | None = None
    folder: str | None = None


def _target(data: bytes) -> str:
    try:
        fields = msgspec.json.decode(data, type=_Target)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""
    return target_text(fields.kind, fields.repo, fields.number, fields.folder)
