"""A lane: one queue's claims and finishes, in three small loops.

  pump     claims when there is room and something may be ready: woken by the marker
           watcher, by a timer set to the next due instant, or by a flush that drained it.
           At a due instant with no room it passes a wake-up on, so a host with room starts
           the job at once instead of at its next idle claim;
  watcher  blocks on the queue's marker (BZPOPMIN) while there is room, so an idle daemon
           sends about one command every few seconds and a new job starts at once;
  flusher  ends finished claims in one script call together with the next claim (one round
           trip per batch), and appends their run records to the local log in one write.
           Two such flights may be under way at once: on a host of many slots its jobs run
           in two cohorts (`Capacity.batch`), each ended while the other runs. A flight
           carries one cohort's endings at most, and their slots go to the claim it carries.
           A cohort landing as the other just began is held until that one's endings fly
           (at most `HOLD_S`), so the two take turns instead of falling into step.

A claim is started with the instant its call was sent: Redis set the lock's deadline no
earlier, so the lock keeper judges the claim from then, however late the reply was read (a
frozen or overloaded daemon may read a lock that has already lapsed).

A Redis fault in any of them is logged and retried; a finish that cannot be sent stays
pending until Redis answers. Its claim is no longer renewed (Redis would not take the renewal
either): if the outage outlasted the lock and a sweep put the job back first, the finish is
refused and its run's outcome is mirrored instead, for the re-pickup to settle on
(`_keep_outcomes`). A local log that cannot be
written is logged and skipped: the finish carries the record to Redis all the same. A call a
script refuses (`BadCall`: a bug, not a fault) is logged and not retried: a refused finish is
dropped, and its claims lapse and are swept, a stall each, so a bug that repeats is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import RedisError

from dispatch.clock import Clock
from dispatch.config.settings import Settings
from dispatch.daemon.capacity import Capacity
from dispatch.daemon.tasks import Lifecycle
from dispatch.errors import BadCall
from dispatch.log import event
from dispatch.queue.transitions import Claim, ClaimBatch, Finish, Queue
from dispatch.records.disk_log import RecordLog
from dispatch.records.mirror import record_runs

CLAIM_RETRY_S = 1.0
FINISH_RETRY_S = 0.5
KEEP_EVERY_S = 1.0  # a blocked outcome is tried again this often (the settled gate waits 3 s)
KEEP_TRIES = 3
MAX_FLIGHTS = 2  # finish-and-claim calls of one lane under way at once
HOLD_S = 0.010  # a cohort that lands while the other just began waits at most this long
Kept = tuple[str, str, str, bytes]  # job id, fencing token, run id, record


@dataclass(frozen=True)
class Timing:
    """Loop periods that are not operator settings; tests shorten them."""

    heartbeat_s: float = 5.0
    block_s: float = 5.0  # longest single BZPOPMIN
    idle_claim_s: float = 30.0  # a safety claim when nothing woke us for this long
    batch: int = 100  # most jobs claimed per call


@dataclass
class Lane:
    queue: Queue
    settings: Settings
    timing: Timing
    capacity: Capacity
    life: Lifecycle
    clock: Clock
    records: RecordLog
    blocking: Redis
    start: Callable[[Claim, float], None]  # a claim, and when the call that took it was sent
    pending: list[tuple[Finish, bytes | None]] = field(default_factory=list)
    flush_now: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    must_claim: bool = True
    due_at: float | None = None  # the clock's monotonic instant of the next delayed job
    claiming: int = 0  # claim calls in flight
    calls_begun: int = 0  # claim calls begun so far: `recover` tells one that came and went
    unsure: bool = False  # a claim call failed: its script may have run, its reply lost
    keeping: set[asyncio.Task[None]] = field(default_factory=set)  # outcomes tried again
    # jobs whose wait state goes once their finish lands, and how (gates/wait/state.py)
    waited: set[str] = field(default_factory=set)
    forget: Callable[[str, Sequence[str]], Awaitable[None]] | None = None
    flights: set[asyncio.Task[None]] = field(default_factory=set)  # flushes under way
    live: int = 0  # jobs this lane started whose endings it has not been given yet
    begun_at: float = float("-inf")  # the clock's monotonic instant the last claims began
    held: list[tuple[Claim, float]] = field(default_factory=list)  # a cohort waiting to begin
    _release: asyncio.TimerHandle | None = None

    @property
    def name(self) -> str:
        return self.queue.name

    def poke(self) -> None:
        """Claim now: jobs were made ready here (a sweep), and the marker that says so may go
        to a host that cannot act on it (one frozen in BZPOPMIN keeps its connection)."""
        self.must_claim = True
        self.wake.set()

    def end(self, finish: Finish, run_json: bytes | None) -> None:
        """The job keeps its slot until this ending is sent (capacity.py)."""
        self.live -= 1
        self.pending.append((finish, run_json))
        self.flush_now.set()

    # -- pump ------------------------------------------------------------------------------

    async def pump(self) -> None:
        while not self.life.draining:
            due = self.due_at is not None and self.clock.monotonic() >= self.due_at
            if self.capacity.free > 0 and (self.must_claim or due):
                self.must_claim = False
                await self.claim()
            elif due:
                await self._pass_on_due()
            await self._sleep_until_woken()

    async def _sleep_until_woken(self) -> None:
        timeout = self.timing.idle_claim_s
        if self.due_at is not None:
            timeout = min(timeout, max(self.due_at - self.clock.monotonic(), 0.0))
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
        except TimeoutError:
            self.must_claim = self.due_at is None  # the idle safety claim
        self.wake.clear()

    async def _pass_on_due(self) -> None:
        """Due, but no room here: wake a host that has room, once for this due instant."""
        self.due_at = None
        try:
            await self.queue.wake()
        except (RedisError, OSError) as exc:
            event("redis_error", during="pass_on_due", error=str(exc))

    async def claim(self) -> None:
        want = self.capacity.take(self.life.draining)
        if want == 0:
            return
        sent = self.clock.monotonic()
        try:
            self.claiming += 1
            self.calls_begun += 1
            batch = await self.queue.claim(want, self.settings.host, self.settings.lock_ms)
        except (RedisError, OSError) as exc:
            self.capacity.give(want)
            self.must_claim = self.unsure = True
            event("redis_error", during="claim", error=str(exc))
            await self.life.stopped_within(CLAIM_RETRY_S)
            return
        except BadCall:
            self.capacity.give(want)  # the supervisor logs it and backs off
            raise
        finally:
            self.claiming -= 1
        self.accept(batch, want, sent)

    def accept(self, batch: ClaimBatch, want: int, sent: float) -> None:
        self.capacity.give(want - len(batch.claims))
        # Redis says how far off the next due job is; the local clock counts that down.
        self.due_at = (
            self.clock.monotonic() + (batch.next_due_ms - batch.now_ms) / 1000
            if batch.next_due_ms
            else None
        )
        if batch.claims and self._hold_back():
            self.held += [(claim, sent) for claim in batch.claims]
            if self._release is None:
                self._release = asyncio.get_running_loop().call_later(HOLD_S, self.begin_held)
        else:
            self._begin([(claim, sent) for claim in batch.claims])
        if batch.claims and len(batch.claims) == want and self.capacity.free > 0:
            self.poke()  # a full claim, and room for more: the next cohort

    def _hold_back(self) -> bool:
        """Whether claims that just landed wait for the other cohort's flight: its jobs began
        moments ago and have not all ended. Begun together, both cohorts would end together
        and fly together, and the loop would idle while both are in the air."""
        return (
            self.capacity.cohorts
            and self.live > 0
            and self.clock.monotonic() - self.begun_at < HOLD_S
        )

    def begin_held(self) -> None:
        """Begin the held cohort: its peer's endings are on their way, or it waited long enough."""
        if self._release is not None:
            self._release.cancel()
            self._release = None
        held, self.held = self.held, []
        self._begin(held)

    def _begin(self, claims: list[tuple[Claim, float]]) -> None:
        if claims:
            self.live += len(claims)
            self.begun_at = self.clock.monotonic()
        for claim, sent in claims:
            self.start(claim, sent)

    async def recover(self, running: set[tuple[str, str]]) -> None:
        """After a claim call failed, hand back the claims of this host that nobody here runs:
        the script may have run and only its reply been lost. Looked at only while no claim
        call is in flight, so a claim whose reply is on its way is never taken for one, and
        given up when one began while the claims were read: they may hold its claims, which
        `ours` was taken too early to know (it looks again at the next renewal)."""
        if not self.unsure or self.claiming:
            return
        began = self.calls_begun
        ours = running | {(f.id, f.token) for f, _ in self.pending}
        ours |= {(c.id, c.token) for c, _ in self.held}
        claims = await self.queue.claims_of(self.settings.host)
        if self.calls_begun != began:  # also any call now in flight: none was at the start
            return
        orphans = [pair for pair in claims if pair not in ours]
        handed, recorded = await self.queue.hand_back(orphans)
        if self.calls_begun == began:  # else a later call may have failed: look again
            self.unsure = False
        if handed or recorded:
            event("lost_claims_handed_back", queue=self.name, jobs=handed, recorded=recorded)

    # -- watcher ---------------------------------------------------------------------------

    async def watch(self) -> None:
        while not self.life.draining:
            await self.capacity.room.wait()
            if self.life.draining:
                return
            try:
                await self._take_wakeup()
            except (RedisError, OSError) as exc:  # one fault must not end this queue's watcher
                event("redis_error", during="watch", error=str(exc))
                await self.life.stopped_within(CLAIM_RETRY_S)

    async def _take_wakeup(self) -> None:
        # Room freed by runs that just ended is usually taken by the flush they started: let
        # it claim first, so the marker its claim will leave is not read and passed on at once.
        await asyncio.sleep(0)
        if self.capacity.free <= 0 or self.life.draining:
            return
        if not await self.blocking.bzpopmin(self.queue.keys.marker, self.timing.block_s):
            return
        if self.capacity.free > 0 and not self.life.draining:
            self.must_claim = True
            self.wake.set()
        else:
            await self.queue.wake()  # pass the wake-up on to a host with room

    # -- flusher ---------------------------------------------------------------------------

    async def flusher(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.life.closing:
            await self.flush_now.wait()
            self.flush_now.clear()
            # A flight carries one cohort's endings at most, taken now: endings of two cohorts
            # that met here go out as two flights, each claiming one cohort again.
            while self.pending and len(self.flights) < MAX_FLIGHTS:
                flight = loop.create_task(self._flight(self._next_cohort()))
                self.flights.add(flight)
                flight.add_done_callback(self.flights.discard)

    def _next_cohort(self) -> list[tuple[Finish, bytes | None]]:
        """Endings for one call, counted as a call under way from now (`recover`)."""
        batch = self.pending[: max(self.capacity.batch, 1)]
        del self.pending[: len(batch)]
        self.claiming += 1  # _send counts it down
        self.calls_begun += 1
        return batch

    async def _flight(self, batch: list[tuple[Finish, bytes | None]]) -> None:
        try:
            await self._send(batch)
        except Exception as exc:  # a bug (faults are handled in _send): said, never silent
            event("task_failed", task=f"flush:{self.name}", error=f"{type(exc).__name__}: {exc}")
        finally:  # what ended meanwhile goes next
            if self.pending:
                self.flush_now.set()

    async def landed(self, timeout_s: float) -> None:
        """Wait for the flushes under way (shutdown, before the last ones)."""
        if self.flights:
            await asyncio.wait(set(self.flights), timeout=timeout_s)

    async def flush(self) -> None:
        """Send one cohort of the pending endings now (shutdown, tests)."""
        await self._send(self._next_cohort())

    async def _send(self, batch: list[tuple[Finish, bytes | None]]) -> None:
        self._write_local(run for _, run in batch if run)
        items = [finish for finish, _ in batch]
        want = self.capacity.take(self.life.draining, freed=len(items))
        sent = self.clock.monotonic()
        try:
            # A held cohort begins once this call is on the wire: its tasks run after this
            # step, which writes the call before its first wait.
            self.begin_held()
            if want:
                oks, claimed = await self.queue.finish_and_claim(
                    items, want, self.settings.host, self.settings.lock_ms
                )
            else:
                oks, claimed = await self.queue.finish(items), None
        except (RedisError, OSError) as exc:
            self.unsure = self.unsure or want > 0
            self.capacity.adjust(want - len(items))  # back as it was: the endings hold theirs
            self.pending[:0] = [(f, None) for f in items]  # the local record is already written
            event("redis_error", during="finish", error=str(exc))
            await self.life.stopped_within(FINISH_RETRY_S)
            self.flush_now.set()
            return
        except BadCall as exc:  # sending it again cannot help; their slots are free
            self.capacity.give(want)
            event("finish_refused_bad_call", jobs=[f.id for f in items], error=str(exc))
            return
        finally:
            self.claiming -= 1
        refused = [item for item, ok in zip(items, oks, strict=True) if not ok]
        if refused:  # before the new claims start: one of them may be a refused job again
            await self._keep_outcomes(refused, claimed)
        self._settle(items, oks, claimed, want, sent)
        await self._forget_waits(items, oks)

    async def _forget_waits(self, items: list[Finish], oks: list[bool]) -> None:
        """A finished job's wait state goes (its TTL is only the backstop)."""
        if not self.waited:
            return
        ended = [
            item.id
            for item, ok in zip(items, oks, strict=True)
            if ok and item.action == "finish" and item.id in self.waited
        ]
        self.waited.difference_update(item.id for item in items)
        if not ended or self.forget is None:
            return
        try:
            await self.forget(self.name, ended)
        except Exception as exc:  # the TTL removes it later; the flush goes on
            event("wait_state_forget_failed", queue=self.name, jobs=len(ended), error=str(exc))

    async def _keep_outcomes(self, refused: list[Finish], claimed: ClaimBatch | None) -> None:
        """A finish refused because its claim was swept (Redis away past the lock) still knows
        how its run ended: mirrored while no other claim holds the job, the re-pickup settles
        on it instead of running the job again. The call that was refused may itself have
        claimed the job again: that claim has run nothing yet, so its token fences the write.
        Another daemon's fresh claim defers one beat for exactly this (gates/settled.py), so a
        record it blocked is tried again in the background. Best effort: a fault costs a rerun."""
        ours = {c.id: c.token for c in claimed.claims} if claimed is not None else {}
        rows = [
            (item.id, ours.get(item.id, item.token), item.run_id, item.run)
            for item in refused
            if item.run and item.action != "defer"  # a deferred run was stopped: nothing to keep
        ]
        left = await self._keep(rows)
        if left:
            task = asyncio.get_running_loop().create_task(self._keep_again(left))
            self.keeping.add(task)
            task.add_done_callback(self.keeping.discard)

    async def _keep_again(self, rows: list[Kept]) -> None:
        for _ in range(KEEP_TRIES):
            if not rows or await self.life.stopped_within(KEEP_EVERY_S):
                return
            rows = await self._keep(rows)

    async def _keep(self, rows: list[Kept]) -> list[Kept]:
        """Store what it can; the rows refused for now (another claim holds the job)."""
        if not rows:
            return []
        argv: list[str | bytes | int] = []
        for job_id, token, run_id, run in rows:
            argv += [job_id, token, run_id, run, self.clock.now_ms()]
        try:
            kept = set(await record_runs(self.queue.redis, self.queue.keys, argv))
        except (RedisError, OSError, BadCall) as exc:
            event("refused_outcome_not_kept", queue=self.name, error=str(exc))
            return []
        if kept:
            event("refused_outcome_kept", queue=self.name, runs=sorted(kept))
        return [row for row in rows if row[2] not in kept]

    def _write_local(self, runs: Iterable[bytes]) -> None:
        """The local copy never keeps a claim from ending: the finish carries every record."""
        try:
            self.records.append(runs)
        except Exception as exc:  # RecordLog logs its own disk faults; this is anything else
            event("run_log_failed", queue=self.name, error=f"{type(exc).__name__}: {exc}")

    def _settle(
        self,
        items: list[Finish],
        oks: list[bool],
        claimed: ClaimBatch | None,
        want: int,
        sent: float,
    ) -> None:
        for item, ok in zip(items, oks, strict=True):
            if not ok:
                event("finish_refused_lock_lost", job=item.id, action=item.action)
        if claimed is not None:
            self.accept(claimed, want, sent)
            if len(claimed.claims) < want:
                self.wake.set()  # the queue ran dry: let the pump re-arm its timer
