"""A lane: one queue's claims and finishes, in three small loops.

  pump     claims when there is room and something may be ready: woken by the marker
           watcher, by a timer set to the next due instant, or by a flush that drained it.
           At a due instant with no room it passes a wake-up on, so a host with room starts
           the job at once instead of at its next idle claim;
  watcher  blocks on the queue's marker (BZPOPMIN) while there is room, so an idle daemon
           sends about one command every few seconds and a new job starts at once;
  flights  end finished claims in one script call together with the next claim, two calls
           under way at most (daemon/flights.py: the flush side).
A host of many slots runs its jobs in two cohorts (`Capacity.batch`), each ended while the
other runs. A cohort landing as the other just began is held until that one's endings fly (at
most `HOLD_S`), so the two take turns instead of falling into step.

A claim is started with the instant its call was sent: Redis set the lock's deadline no
earlier, so the lock keeper judges the claim from then, however late the reply was read (a
frozen or overloaded daemon may read a lock that has already lapsed).

A Redis fault in any of them is logged and retried. A claim call that failed may still have
run (its reply lost): the lane is then `unsure`, and `recover` hands back the claims of this
host that nobody here runs. Every claim call is counted while it is under way, a flight's too
(`call_begins`, `call_ends`), so a claim whose reply is on its way is never taken for one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field

from redis.asyncio import Redis

from dispatch.clock import Clock
from dispatch.config.settings import Settings
from dispatch.daemon.capacity import Capacity
from dispatch.daemon.flights import Flights, Forget
from dispatch.daemon.tasks import Lifecycle
from dispatch.errors import BadCall, RedisUnavailable
from dispatch.log import event
from dispatch.queue.transitions import Claim, ClaimBatch, Finish, Queue
from dispatch.records.disk_log import RecordLog

CLAIM_RETRY_S = 1.0
HOLD_S = 0.010  # a cohort that lands while the other just began waits at most this long


@dataclass(frozen=True)
class Timing:
    """Loop periods that are not operator settings; tests shorten them."""

    heartbeat_s: float = 5.0
    block_s: float = 5.0  # longest single BZPOPMIN
    idle_claim_s: float = 30.0  # a safety claim when nothing woke us for this long
    batch: int = 100  # most jobs claimed per call
    stop_slack_s: float = 10.0  # past the stop grace, when a stop that has not taken is told


@dataclass
class Lane:
    queue: Queue
    settings: Settings
    timing: Timing
    capacity: Capacity
    life: Lifecycle
    clock: Clock
    records: InitVar[RecordLog]  # the local run log the flights append to
    blocking: Redis
    start: Callable[[Claim, float], None]  # a claim, and when the call that took it was sent
    forget: InitVar[Forget | None] = None  # removes finished jobs' wait states
    flights: Flights = field(init=False)  # the flush side: endings on their way
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    must_claim: bool = True
    due_at: float | None = None  # the clock's monotonic instant of the next delayed job
    claiming: int = 0  # claim calls in flight, flights included
    calls_begun: int = 0  # claim calls begun so far: `recover` tells one that came and went
    unsure: bool = False  # a claim call failed: its script may have run, its reply lost
    live: int = 0  # jobs this lane started whose endings it has not been given yet
    begun_at: float = float("-inf")  # the clock's monotonic instant the last claims began
    held: list[tuple[Claim, float]] = field(default_factory=list)  # a cohort waiting to begin
    _release: asyncio.TimerHandle | None = None

    def __post_init__(self, records: RecordLog, forget: Forget | None) -> None:
        self.flights = Flights(self, records, forget)

    @property
    def name(self) -> str:
        return self.queue.name

    def poke(self) -> None:
        """Claim now: jobs were made ready here (a sweep), and the marker that says so may go
        to a host that cannot act on it (one frozen in BZPOPMIN keeps its connection)."""
        self.must_claim = True
        self.wake.set()

    def end(self, finish: Finish, run_json: bytes | None, *, waited: bool = False) -> None:
        """The job keeps its slot until this ending is sent (capacity.py). `waited`: its wait
        state goes once the finish lands."""
        self.live -= 1
        if waited:
            self.flights.waited.add(finish.id)
        self.flights.add(finish, run_json)

    def call_begins(self) -> None:
        """A claim call (a flight's included) is under way from now."""
        self.claiming += 1
        self.calls_begun += 1

    def call_ends(self) -> None:
        self.claiming -= 1

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
        except RedisUnavailable as exc:
            event("redis_error", during="pass_on_due", error=str(exc))

    async def claim(self) -> None:
        want = self.capacity.take(self.life.draining)
        if want == 0:
            return
        sent = self.clock.monotonic()
        try:
            self.call_begins()
            batch = await self.queue.claim(want, self.settings.host, self.settings.lock_ms)
        except RedisUnavailable as exc:
            self.capacity.give(want)
            self.must_claim = self.unsure = True
            event("redis_error", during="claim", error=str(exc))
            await self.life.stopped_within(CLAIM_RETRY_S)
            return
        except BadCall:
            self.capacity.give(want)  # the supervisor logs it and backs off
            raise
        finally:
            self.call_ends()
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
        ours = running | {(f.id, f.token) for f, _ in self.flights.pending}
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
            except RedisUnavailable as exc:  # one fault must not end this queue's watcher
                event("redis_error", during="watch", error=str(exc))
                await self.life.stopped_within(CLAIM_RETRY_S)

    async def _take_wakeup(self) -> None:
        # Room freed by runs that just ended is usually taken by the flush they started: let
        # it claim first, so the marker its claim will leave is not read and passed on at once.
        await asyncio.sleep(0)
        if self.capacity.free <= 0 or self.life.draining:
            return
        if not await self.queue.take_marker(self.blocking, self.timing.block_s):
            return
        if self.capacity.free > 0 and not self.life.draining:
            self.must_claim = True
            self.wake.set()
        else:
            await self.queue.wake()  # pass the wake-up on to a host with room
