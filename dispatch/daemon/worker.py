"""The daemon: one asyncio loop that claims, runs and finishes jobs from its queues.

Per queue ("lane") four small loops:
  pump     claims when there is room and something may be ready: woken by the marker
           watcher, by a timer set to the next due instant, or by a flush that drained it;
  watcher  blocks on the queue's marker (BZPOPMIN) while there is room, so an idle daemon
           sends about one command every few seconds and a new job starts at once;
  flusher  ends finished claims in one script call together with the next claim (one round
           trip per batch), and appends their run records to the local log in one write;
  sweeper  puts back (or fails) the queue's jobs whose lock deadline passed.
One loop each for the whole daemon: the lock renewer (one call per queue, which also carries
cancel requests) and the heartbeat. A lock lost (renewal refused, or Redis unreachable past the
lock deadline) aborts the run: a job never runs twice at once because a lock lapsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.clock import Clock, SystemClock
from dispatch.config.settings import Settings
from dispatch.daemon.processor import Ending, Processor
from dispatch.log import event
from dispatch.model import Result, encoder, iso
from dispatch.queue import keys
from dispatch.queue.scripts import load_all
from dispatch.queue.transitions import Claim, ClaimBatch, Finish, Queue
from dispatch.reasons import INFRA, LOCK_LOST, OPERATOR_CANCEL, SHUTDOWN, STALLED
from dispatch.records.disk_log import RecordLog, encode
from dispatch.runners.base import AbortSignal


@dataclass(frozen=True)
class Timing:
    """Loop periods; tests shorten them."""

    renew_s: float = 2.0  # also how fast a cancel request is seen
    sweep_s: float = 10.0
    heartbeat_s: float = 5.0
    block_s: float = 5.0  # longest single BZPOPMIN
    idle_claim_s: float = 30.0  # a safety claim when nothing woke us for this long
    batch: int = 100  # most jobs claimed per call


@dataclass
class Running:
    claim: Claim
    signal: AbortSignal = field(default_factory=AbortSignal)
    renewed_at: float = 0.0  # clock.monotonic() when the last successful renewal was sent


@dataclass
class Lane:
    queue: Queue
    pending: list[tuple[Finish, bytes | None]] = field(default_factory=list)
    flush: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    must_claim: bool = True
    due_at: float | None = None  # the clock's monotonic instant of the next delayed job


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
    ) -> None:
        self.s = settings
        self.redis = redis
        self.blocking = blocking or redis
        self.processor = processor
        self.t = timing or Timing()
        self.clock = clock or SystemClock()
        self.records = records or RecordLog(settings.state_dir)
        self.lanes = {q: Lane(Queue(redis, q, settings.prefix)) for q in settings.queues}
        self.running: dict[tuple[str, str], Running] = {}
        self.free = settings.concurrency
        self.room = asyncio.Event()
        self.room.set()
        self.idle = asyncio.Event()
        self.idle.set()
        self.draining = False
        self.closing = False
        self.stopping = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then shut down gracefully."""
        await load_all(self.redis)
        await self._beat()
        await self.redis.sadd(keys.hosts_registry(self.s.prefix), self.s.host)
        event(
            "worker_started",
            host=self.s.host,
            queues=list(self.lanes),
            concurrency=self.s.concurrency,
        )
        loops = [
            self._every(self.t.renew_s, self._renew),
            self._every(self.t.heartbeat_s, self._beat),
        ]
        for name in self.lanes:
            loops += [self._pump(name), self._watch(name), self._flusher(name)]
            loops.append(self._every(self.t.sweep_s, self._sweeper(name), at_start=True))
        background = [asyncio.create_task(c) for c in loops]
        await stop.wait()
        await self.shutdown()
        await self._close(background)
        self.records.close()
        event("worker_stopped", host=self.s.host)

    async def _close(self, background: list[asyncio.Task[Any]]) -> None:
        """Let every loop return on its own: cancelling a Redis call mid-flight can leave a
        connection half-read (and the cancellation swallowed), so cancel only stragglers."""
        self.closing = True
        self.stopping.set()
        self.room.set()
        for lane in self.lanes.values():
            lane.flush.set()
            with contextlib.suppress(RedisError, OSError):
                await lane.queue.wake()  # returns our own watcher from BZPOPMIN at once
        _, hung = await asyncio.wait(background, timeout=self.t.block_s + 2.0)
        for task in hung:
            task.cancel()
        if hung:
            event("worker_tasks_hung", tasks=len(hung))

    async def shutdown(self) -> None:
        """Stop claiming; let running jobs finish within the grace, then abort them."""
        self.draining = True
        self.room.set()  # let the watchers see the drain
        for lane in self.lanes.values():
            lane.wake.set()
        event("worker_draining", running=len(self.running), grace_s=self.s.shutdown_grace_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), self.s.shutdown_grace_s)
        for entry in self.running.values():
            entry.signal.abort(SHUTDOWN)
        await self.idle.wait()
        deadline = self.clock.monotonic() + 10.0
        for lane in self.lanes.values():
            while lane.pending and self.clock.monotonic() < deadline:
                await self._flush(lane)
            if lane.pending:  # their locks lapse and the sweeper puts them back
                event("finish_abandoned", queue=lane.queue.name, jobs=len(lane.pending))

    def held(self) -> set[tuple[str, str]]:
        """(job id, lock token) of every claim this process runs now."""
        return {(e.claim.id, e.claim.token) for e in self.running.values()}

    def abort_all(self, reason: str) -> None:
        """Abort every run now, without the shutdown's grace."""
        for entry in self.running.values():
            entry.signal.abort(reason)

    async def _every(
        self, period_s: float, fn: Callable[[], Awaitable[None]], at_start: bool = False
    ) -> None:
        if not at_start and await self._stopped_within(period_s):
            return
        while not self.closing:
            try:
                await fn()
            except (RedisError, OSError, TimeoutError) as exc:
                event("redis_error", during=getattr(fn, "__name__", "loop"), error=str(exc))
            if await self._stopped_within(period_s * random.uniform(0.9, 1.1)):
                return

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()

    # -- claiming --------------------------------------------------------------------------

    def _take_room(self) -> int:
        want = 0 if self.draining else min(self.free, self.t.batch)
        self._adjust(-want)
        return want

    def _adjust(self, delta: int) -> None:
        self.free += delta
        if self.free > 0:
            self.room.set()
        else:
            self.room.clear()

    async def _pump(self, name: str) -> None:
        lane = self.lanes[name]
        while not self.draining:
            due = lane.due_at is not None and self.clock.monotonic() >= lane.due_at
            if self.free > 0 and (lane.must_claim or due):
                lane.must_claim = False
                await self._claim(lane)
            timeout = self.t.idle_claim_s
            if self.free > 0 and lane.due_at is not None:
                timeout = min(timeout, max(lane.due_at - self.clock.monotonic(), 0.0))
            try:
                await asyncio.wait_for(lane.wake.wait(), timeout)
            except TimeoutError:
                lane.must_claim = lane.due_at is None  # the idle safety claim
            lane.wake.clear()

    async def _claim(self, lane: Lane) -> None:
        want = self._take_room()
        if want == 0:
            return
        try:
            batch = await lane.queue.claim(want, self.s.host, self.s.lock_ms)
        except (RedisError, OSError) as exc:
            self._adjust(want)
            lane.must_claim = True
            event("redis_error", during="claim", error=str(exc))
            await asyncio.sleep(1.0)
            return
        self._accept(lane, batch, want)

    def _accept(self, lane: Lane, batch: ClaimBatch, want: int) -> None:
        self._adjust(want - len(batch.claims))
        # Redis says how far off the next due job is; the local clock counts that down.
        lane.due_at = (
            self.clock.monotonic() + (batch.next_due_ms - batch.now_ms) / 1000
            if batch.next_due_ms
            else None
        )
        for claim in batch.claims:
            self._start(claim)

    async def _watch(self, name: str) -> None:
        lane = self.lanes[name]
        while not self.draining:
            await self.room.wait()
            if self.draining:
                return
            try:
                await self._take_wakeup(lane)
            except (RedisError, OSError) as exc:  # one fault must not end this queue's watcher
                event("redis_error", during="watch", error=str(exc))
                await asyncio.sleep(1.0)

    async def _take_wakeup(self, lane: Lane) -> None:
        if not await self.blocking.bzpopmin(lane.queue.keys.marker, self.t.block_s):
            return
        if self.free > 0 and not self.draining:
            lane.must_claim = True
            lane.wake.set()
        else:
            await lane.queue.wake()  # pass the wake-up on to a host with room

    # -- running ---------------------------------------------------------------------------

    def _start(self, claim: Claim) -> None:
        entry = Running(claim, renewed_at=self.clock.monotonic())
        self.running[(claim.queue, claim.id)] = entry
        self.idle.clear()
        task = asyncio.create_task(self._run(entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, entry: Running) -> None:
        claim = entry.claim
        try:
            ending = await self.processor.process(claim, entry.signal)
        except Exception as exc:
            event("job_crashed", job=claim.id, error=f"{type(exc).__name__}: {exc}")
            ending = self.processor.crashed(claim, exc)
        del self.running[(claim.queue, claim.id)]
        self._end(entry, ending)
        if not self.running:
            self.idle.set()

    def _end(self, entry: Running, ending: Ending) -> None:
        claim, record = entry.claim, ending.record
        run_json = encode(record) if record else None
        fleet_copy = None if ending.mirrored else run_json  # already in Redis: write it once
        finish = Finish(
            ending.action,
            claim.id,
            claim.token,
            ending.payload,
            ending.delay_ms,
            record.run_id if record and fleet_copy else "",
            fleet_copy or b"",
        )
        lane = self.lanes[claim.queue]
        lane.pending.append((finish, run_json))
        lane.flush.set()
        if ending.lingering is None:
            self._adjust(1)
        else:  # the host's hold stays until the run is really gone
            ending.lingering.add_done_callback(lambda _: self._adjust(1))

    async def _flusher(self, name: str) -> None:
        lane = self.lanes[name]
        while not self.closing:
            await lane.flush.wait()
            lane.flush.clear()
            if lane.pending:
                await self._flush(lane)

    async def _flush(self, lane: Lane) -> None:
        batch, lane.pending = lane.pending, []
        self.records.append(run for _, run in batch if run)
        items = [finish for finish, _ in batch]
        want = self._take_room()
        try:
            if want:
                oks, claimed = await lane.queue.finish_and_claim(
                    items, want, self.s.host, self.s.lock_ms
                )
            else:
                oks, claimed = await lane.queue.finish(items), None
        except (RedisError, OSError) as exc:
            self._adjust(want)
            lane.pending[:0] = [(f, None) for f in items]  # the local record is already written
            event("redis_error", during="finish", error=str(exc))
            await asyncio.sleep(0.5)
            lane.flush.set()
            return
        for item, ok in zip(items, oks, strict=True):
            if not ok:
                event("finish_refused_lock_lost", job=item.id, action=item.action)
        if claimed is not None:
            self._accept(lane, claimed, want)
            if len(claimed.claims) < want:
                lane.wake.set()  # the queue ran dry: let the pump re-arm its timer

    # -- upkeep ----------------------------------------------------------------------------

    async def _renew(self) -> None:
        for name, lane in self.lanes.items():
            held = {k[1]: e for k, e in self.running.items() if k[0] == name}
            if not held:
                continue
            sent = self.clock.monotonic()
            try:
                locks = [(i, e.claim.token) for i, e in held.items()]
                lost, cancels = await asyncio.wait_for(
                    lane.queue.extend(locks, self.s.lock_ms), self.t.renew_s * 2
                )
            except (RedisError, OSError, TimeoutError) as exc:
                self._lapse(held.values(), self.clock.monotonic(), str(exc))
                continue
            for entry in held.values():
                entry.renewed_at = sent
            for job_id in lost:
                event("lock_lost", job=job_id, queue=name)
                held[job_id].signal.abort(LOCK_LOST)
            for job_id in cancels:
                await self._take_cancel(lane, held[job_id])

    def _lapse(self, entries: Iterable[Running], now: float, error: str) -> None:
        """Redis is unreachable: a run whose lock may have expired must stop."""
        event("renew_failed", error=error)
        margin = 1.0
        for entry in entries:
            if now - entry.renewed_at > self.s.lock_ms / 1000 - margin:
                entry.signal.abort(LOCK_LOST)

    async def _take_cancel(self, lane: Lane, entry: Running) -> None:
        if entry.signal.event.is_set():
            return
        entry.signal.abort(OPERATOR_CANCEL)
        event("cancel_taken", job=entry.claim.id)
        ack = lane.queue.keys.ack(entry.claim.id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lpush(ack, self.s.host)
            pipe.expire(ack, 60)
            await pipe.execute()

    def _sweeper(self, name: str) -> Callable[[], Awaitable[None]]:
        queue = self.lanes[name].queue

        async def sweep() -> None:
            result = Result(
                state="failed",
                outcome=INFRA,
                reason=STALLED,
                host=self.s.host,
                ended_at=iso(self.clock.now_ms()) or "",
            )
            requeued, failed = await queue.sweep(self.s.max_stalls, encoder.encode(result))
            if requeued or failed:
                event("stalled_jobs_swept", queue=name, requeued=requeued, failed=failed)

        return sweep

    async def _beat(self) -> None:
        alive = keys.host_alive(self.s.host, self.s.prefix)
        ttl_ms = int(self.t.heartbeat_s * 3000)
        await self.redis.set(
            alive, encoder.encode({"host": self.s.host, "running": len(self.running)}), px=ttl_ms
        )
