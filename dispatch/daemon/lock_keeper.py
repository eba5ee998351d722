"""The lock keeper: keeps this daemon's claims alive, and stops a run before its claim can lapse.

Every renewal period it renews the running claims of each queue in one call (`job_extend`,
which also reports their cancel requests), and it judges every run by the local clock:

- a renewal refused (another token holds the job, or its deadline passed) is a lost claim:
  the run is stopped at once (urgent: SIGKILL, no grace), since another host may run it now;
- Redis unreachable: the lock was last pushed to at least `sent + lock` (Redis set the new
  deadline no earlier than the renewal was sent), so the stop starts at
      sent + lock - stop grace - 2 renewal periods - margin
  leaving the grace to finish inside the lock, and turns urgent at `sent + lock - margin`,
  when the lock is presumed lost. Both are `lock-lost`: the job goes back without spending an
  attempt (see the processor), and the run's holds stay until it is really gone.

The settings refuse a lock shorter than 3 x (stop grace + renewal period), so an outage
shorter than about a third of the lock never stops a run.

A stopped run keeps its claim and its holds until it is really gone, however long that takes;
one still there `ABORT_SLACK_S` past the stop grace is a stop that did not take: logged once
(`stop_did_not_take`, naming the container), published with the heartbeat (`stuck()`, which
`dispatch why` and `dispatch doctor` read), judged at the renewal ticks (so up to two periods
late: a per-run timer for it cost more than the rest of a no-op pickup's run). The operator's
`dispatch cancel --kill ID` leaves a kill request (`keys.kill`, naming the claim) beside its
cancel request; the keeper looks for one only for runs being stopped, makes the stop urgent and
has the runner send the kill again, in a task of its own so a hung engine never holds up the
renewals. When the run is gone at last, its attempt ends once: `operator-cancel`, whatever
stopped it first, since the operator asked for it to end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

import msgspec
from redis.asyncio import Redis

from dispatch.clock import Clock
from dispatch.config.settings import Settings
from dispatch.errors import RedisUnavailable
from dispatch.log import event
from dispatch.model import iso
from dispatch.queue.faults import redis_call
from dispatch.queue.transitions import Claim, Queue
from dispatch.reasons import LOCK_LOST, OPERATOR_CANCEL
from dispatch.runners.base import AbortSignal, Runner

ABORT_SLACK_S = 10.0  # past the stop grace, how long a stop may take before it is told (Timing)


class Running(msgspec.Struct):
    """A claim this process holds, from claim to the end of its finish."""

    claim: Claim
    signal: AbortSignal = msgspec.field(default_factory=AbortSignal)
    renewed_at: float = 0.0  # clock.monotonic() when the last successful renewal was sent
    stop_seen: float | None = None  # clock.monotonic() at the first tick that saw it aborted
    stop_since_ms: int = 0  # clock.now_ms() then, for `dispatch why`
    stop_logged: bool = False  # the stop did not take: logged, and published
    claimed_ms: int = 0  # clock.now_ms() at the claim, for the heartbeat's running jobs
    begun_at: float = 0.0  # clock.monotonic() when its pickup began (Capacity.ran)


class LockKeeper:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        queues: Mapping[str, Queue],
        running: Mapping[tuple[str, str], Running],
        clock: Clock,
        runner: Runner | None = None,
        slack_s: float = ABORT_SLACK_S,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.queues = queues
        self.running = running
        self.clock = clock
        self.runner = runner
        self._kills: set[asyncio.Task[None]] = set()
        margin = settings.renew_s / 2
        lock_s = settings.lock_ms / 1000
        self.stop_after_s = lock_s - settings.stop_grace_s - 2 * settings.renew_s - margin
        self.lost_after_s = lock_s - margin
        self.unconfirmed_after_s = settings.stop_grace_s + slack_s
        self.ticked_at = clock.monotonic()  # the last tick's end: the watchdog asks it

    async def tick(self) -> None:
        """One renewal period: judge every run's deadline, renew every queue's claims (each
        call bounded by the period), and judge again with what the renewals told."""
        self.judge(self.running.values())
        self._note_stops()
        await asyncio.gather(*(self._renew(q) for q in self.queues.values()))
        self.judge(self.running.values())
        self.ticked_at = self.clock.monotonic()

    def _note_stops(self) -> None:
        """Log, once, each aborted run that is not gone long past its stop grace."""
        now = self.clock.monotonic()
        for entry in self.running.values():
            if not entry.signal.is_set or entry.stop_logged:
                continue
            if entry.stop_seen is None:
                entry.stop_seen, entry.stop_since_ms = now, self.clock.now_ms()
            elif now - entry.stop_seen >= self.unconfirmed_after_s:
                entry.stop_logged = True
                c = entry.claim
                event(
                    "stop_did_not_take",
                    job=c.id,
                    queue=c.queue,
                    reason=entry.signal.reason,
                    run=self._running_as(c.id),
                    since=iso(entry.stop_since_ms),
                )

    def stuck(self) -> list[dict[str, str]]:
        """The runs whose stop did not take, for the heartbeat."""
        return [
            {
                "job": e.claim.id,
                "queue": e.claim.queue,
                "reason": e.signal.reason,
                "run": self._running_as(e.claim.id),
                "since": iso(e.stop_since_ms) or "",
            }
            for e in self.running.values()
            if e.stop_logged
        ]

    def _running_as(self, job_id: str) -> str:
        return self.runner.running_as(job_id) if self.runner is not None else "its run"

    def judge(self, entries: Iterable[Running]) -> None:
        """Stop each run whose claim may lapse before its stop could finish."""
        now = self.clock.monotonic()
        for entry in entries:
            self._judge(entry, now)

    def judge_one(self, entry: Running) -> None:
        """`judge` of one run: at its claim, and at the last look before it starts."""
        self._judge(entry, self.clock.monotonic())

    def _judge(self, entry: Running, now: float) -> None:
        quiet = now - entry.renewed_at
        if quiet >= self.lost_after_s:
            entry.signal.abort(LOCK_LOST, urgent=True)
        elif quiet >= self.stop_after_s and not entry.signal.is_set:
            event("lock_deadline_stop", job=entry.claim.id, quiet_s=round(quiet, 3))
            entry.signal.abort(LOCK_LOST)

    async def _renew(self, queue: Queue) -> None:
        held = {k[1]: e for k, e in self.running.items() if k[0] == queue.name}
        if not held:
            return
        sent = self.clock.monotonic()
        try:
            locks = [(job_id, e.claim.token) for job_id, e in held.items()]
            lost, cancels = await asyncio.wait_for(
                queue.extend(locks, self.settings.lock_ms), self.settings.renew_s
            )
        except (RedisUnavailable, TimeoutError) as exc:  # a fault, or no answer within the period
            event("renew_failed", queue=queue.name, error=str(exc) or type(exc).__name__)
            return
        for job_id, entry in held.items():
            if job_id not in lost:
                entry.renewed_at = sent
        for job_id in lost:
            if (queue.name, job_id) not in self.running:
                continue  # its run ended while the renewal was out: its finish took the lock
            event("lock_lost", job=job_id, queue=queue.name)
            held[job_id].signal.abort(LOCK_LOST, urgent=True)
        for job_id in cancels:
            await self._take_cancel(queue, held[job_id])
        stopping = [e for e in held.values() if e.signal.is_set]
        if stopping:
            await self._take_kills(queue, stopping)

    async def _take_kills(self, queue: Queue, stopping: list[Running]) -> None:
        """The kill requests for runs being stopped: each one's claim, exactly, or nothing."""
        try:
            with redis_call(f"kill requests {queue.name}"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    for entry in stopping:
                        pipe.getdel(queue.keys.kill(entry.claim.id))
                    asked = await asyncio.wait_for(pipe.execute(), self.settings.renew_s)
        except (RedisUnavailable, TimeoutError) as exc:
            event("kill_requests_unread", queue=queue.name, error=str(exc) or type(exc).__name__)
            return
        for entry, token in zip(stopping, asked, strict=True):
            if token is not None and _text(token) == entry.claim.token:
                await self._take_kill(queue, entry)

    async def _take_kill(self, queue: Queue, entry: Running) -> None:
        entry.signal.abort(OPERATOR_CANCEL, urgent=True, over=True)
        run = self._running_as(entry.claim.id)
        event("kill_taken", job=entry.claim.id, run=run, reason=entry.signal.reason)
        if self.runner is not None:
            task = asyncio.create_task(self._kill_again(entry.claim.id, run))
            self._kills.add(task)
            task.add_done_callback(self._kills.discard)
        await self._acknowledge(queue, entry.claim.id)

    async def _kill_again(self, job_id: str, run: str) -> None:
        assert self.runner is not None
        try:
            await self.runner.kill_again(job_id)
        except Exception as exc:  # the engine's answer, whatever it is: the run stays held
            event("kill_failed", job=job_id, run=run, error=f"{type(exc).__name__}: {exc}")

    async def _take_cancel(self, queue: Queue, entry: Running) -> None:
        if entry.signal.is_set:
            return
        entry.signal.abort(OPERATOR_CANCEL)
        event("cancel_taken", job=entry.claim.id)
        await self._acknowledge(queue, entry.claim.id)

    async def _acknowledge(self, queue: Queue, job_id: str) -> None:
        ack = queue.keys.ack(job_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.lpush(ack, self.settings.host)
            pipe.expire(ack, 60)
            await pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
