"""The minter: each round, every trigger's next occurrences become jobs in the delayed set.

A round (every `DISPATCH_TRIGGER_EVERY`, and once before the daemon's first claim):

1. Agreement (`agreement.py`): a fingerprint that differs from a live peer's mints nothing.
2. `seen`: the previous round's instant, swapped for this one. A gap of more than
   `max(3 periods, 1 minute)` means no daemon minted in between: downtime. Every instant of a
   round is the server's (this host's clock plus its measured offset, `Minter.now_ms`): `seen`
   was written by another host, and a host whose clock ran ahead would otherwise take every
   round for downtime and cancel occurrences not yet due.
3. Per trigger of the file: the occurrences within 3 periods ahead (at least the next one) are
   wanted, each a job with a deterministic id and dedup key (`spec.py`), due at its instant plus
   the trigger's jitter. Pending occurrences no longer wanted (the trigger was disabled, paused,
   or its schedule changed: another signature) are withdrawn (`job_withdraw.lua`); wanted ones
   not yet minted are enqueued. Whoever mints first makes the job; the others get a duplicate.
   After downtime the catch-up policy decides first (`_catch_up`), and before a new occurrence
   is minted the stall guard looks at the last jobs' outcomes (`_stalled`).
4. Triggers gone from the file: their pending occurrences are withdrawn, their history expires.

Overlap is decided at pickup, not here (`gates/trigger_overlap.py`): a job minted ahead cannot
know whether its predecessor will still run at its instant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from dispatch.clock import Clock, ServerTime
from dispatch.config.schemas import ConfigSnapshot
from dispatch.config.settings import Settings
from dispatch.errors import InvalidJob, ScriptError
from dispatch.log import event
from dispatch.model import Result, RunRecord, encoder, iso
from dispatch.reasons import INFRA, POLICY, TRIGGER_MISSED
from dispatch.triggers.agreement import Agreement, agreement
from dispatch.triggers.spec import Compiled, compile_trigger, dedup_of, fingerprint, occurrence_id
from dispatch.triggers.store import Minted, TriggerState, TriggerStore

AHEAD_PERIODS = 3
MOST_PENDING = 50
GAP_FLOOR_MS = 60_000
MANUAL = "run"  # the signature of a `dispatch trigger run` job: never withdrawn


@dataclass(frozen=True)
class Current:
    snapshot: ConfigSnapshot
    triggers: list[Compiled]
    fingerprint: str


class Minter:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        clock: Clock,
        config: Callable[[], ConfigSnapshot],
        server_time: ServerTime | None = None,
    ) -> None:
        self.s = settings
        self.redis = redis
        self.clock = clock
        # None trusts `clock` as it is (tests move it by hand); a daemon judges by the server
        self.server_time = server_time
        self.config = config
        self.store = TriggerStore(redis, settings.prefix)
        self.ahead_ms = int(AHEAD_PERIODS * settings.trigger_every_s * 1000)
        self.gap_ms = max(self.ahead_ms, GAP_FLOOR_MS)
        self._compiled: Current | None = None
        self.agreement: Agreement | None = None

    def current(self) -> Current:
        snapshot = self.config()
        if self._compiled is None or self._compiled.snapshot is not snapshot:
            triggers = [compile_trigger(t) for t in snapshot.triggers]
            self._compiled = Current(snapshot, triggers, fingerprint(snapshot.triggers))
        return self._compiled

    def fingerprint(self) -> str:
        return self.current().fingerprint

    async def now_ms(self) -> int:
        """The round's instant: by the server's TIME, through this host's measured offset, as
        `seen` was written by whichever host minted last (dispatch/fleet/skew.py)."""
        if self.server_time is None:
            return self.clock.now_ms()
        return await self.server_time.now_ms(self.redis)

    async def tick(self) -> None:
        """One round (module docstring)."""
        now = await self.now_ms()
        current = self.current()
        if not await self._agreed(current.fingerprint):
            return
        before = await self.store.mark_seen(now)
        gap_from = before if before is not None and now - before > self.gap_ms else None
        ids = [c.id for c in current.triggers]
        gone = sorted(await self.store.registry() - set(ids))
        states = await self.store.states(ids + gone, now)
        for c in current.triggers:
            await _guarded(c.id, self._one(c, states[c.id], now, gap_from))
        for tid in gone:
            await _guarded(tid, self._retire(tid, states[tid]))

    async def _agreed(self, mine: str) -> bool:
        found = await agreement(self.redis, self.s.prefix, self.s.host, mine)
        last, self.agreement = self.agreement, found
        if not found.agreed and (last is None or last.differing != found.differing):
            event("triggers_disagree", fingerprint=mine, hosts=sorted(found.differing))
        elif found.agreed and last is not None and not last.agreed:
            event("triggers_agree", fingerprint=mine, peers=found.peers)
        return found.agreed

    async def _one(self, c: Compiled, st: TriggerState, now: int, gap_from: int | None) -> None:
        active = c.trigger.enabled and not st.paused and not st.disabled
        # by signature, not by this round's plan: a host whose clock runs a little behind
        # must not withdraw what a peer minted at the far end of its own horizon
        for m in st.future:
            if not active or m.sig != c.sig:
                await self._withdraw(c.id, m)
        if not active:
            return
        if gap_from is not None:
            await self._catch_up(c, gap_from, now, bool(st.future))
        have = {m.member for m in st.future}
        todo = [m for m in self._plan(c, now) if m.member not in have]
        if todo and await self._stalled(c, st, now):
            return
        for m in todo:
            await self._mint(c, m, c.due(m.at_ms))

    def _plan(self, c: Compiled, now: int) -> list[Minted]:
        ats = c.schedule.upcoming(now, now + self.ahead_ms, MOST_PENDING)
        return [Minted(occurrence_id(c.id, at), c.queue, c.sig, at) for at in ats]

    async def _mint(self, c: Compiled, m: Minted, due_ms: int) -> None:
        dedup = dedup_of(c.id, m.at_ms)
        done = await self.store.mint(c.id, m, c.job(m.job_id, dedup), due_ms, dedup)
        if done != "duplicate":
            event(f"trigger_mint_{done}", trigger=c.id, job=m.job_id, at=iso(m.at_ms))

    async def _withdraw(self, tid: str, m: Minted) -> None:
        if m.sig == MANUAL:
            return
        withdrawn = await self.store.withdraw(tid, m, dedup_of(tid, m.at_ms))
        event("trigger_withdrawn", trigger=tid, job=m.job_id, withdrawn=withdrawn)

    async def _catch_up(self, c: Compiled, gap_from: int, now: int, pending: bool) -> None:
        """After downtime: `skip` cancels the occurrences nobody started; `latest` runs the most
        recent one still within `catchupWindow`, once, and cancels the rest."""
        missed = await self.store.between(c.id, gap_from, now)
        if not missed and not pending and not await self.store.recent(c.id, now, 1):
            return  # nothing of it was ever minted: the trigger is new, nothing was missed
        fresh = await self.store.untouched(missed)
        late = self._late_run(c, gap_from, now)
        for m, untouched in zip(missed, fresh, strict=True):
            if untouched and m.at_ms != late:
                await self._cancel_missed(m, now)
        if late is not None and all(m.at_ms != late for m in missed):
            await self._mint(c, Minted(occurrence_id(c.id, late), c.queue, c.sig, late), now)
        ran = len(missed) - sum(fresh) + (late is not None)
        skipped = max(c.schedule.count(gap_from, now) - ran, 0)
        words = f"{iso(now)}: {skipped} skipped after no minting since {iso(gap_from)}"
        await self.store.set_fields(c.id, caught_up=words)
        if skipped:
            await self.store.note_skipped(c.id, skipped, f"{words} (catchup {c.trigger.catchup})")
        event("trigger_caught_up", trigger=c.id, skipped=skipped, late=iso(late))

    def _late_run(self, c: Compiled, gap_from: int, now: int) -> int | None:
        if c.trigger.catchup != "latest":
            return None
        at = c.schedule.latest(now)
        return at if at is not None and at > gap_from and now - at <= c.window_ms else None

    async def _cancel_missed(self, m: Minted, now: int) -> None:
        ended = iso(now) or ""
        result = Result(
            state="cancelled",
            outcome=POLICY,
            reason=TRIGGER_MISSED,
            host=self.s.host,
            ended_at=ended,
        )
        record = RunRecord(
            id=m.job_id,
            attempt=1,
            host=self.s.host,
            queue=m.queue,
            outcome=POLICY,
            reason=TRIGGER_MISSED,
            ended_at=ended,
        )
        q = self.store.queue(m.queue)
        await q.cancel(m.job_id, encoder.encode(result), record.run_id, encoder.encode(record))

    async def _stalled(self, c: Compiled, st: TriggerState, now: int) -> bool:
        """The stall guard: the last N ended jobs all infrastructure failures -> disabled."""
        n = self.s.trigger_stall_max
        recent = [m for m in await self.store.recent(c.id, now, 4 * n) if m.at_ms >= st.since_ms]
        ended = [r for r in await self.store.results(recent) if r is not None][:n]
        if len(ended) < n or any(r.outcome != INFRA for r in ended):
            return False
        words = f"{iso(now)}: {n} infrastructure failures in a row (last: {ended[0].reason})"
        await self.store.set_fields(c.id, disabled=words)
        for m in st.future:
            await self._withdraw(c.id, m)
        event("trigger_disabled", trigger=c.id, failures=n, reason=ended[0].reason)
        return True

    async def _retire(self, tid: str, st: TriggerState) -> None:
        for m in st.future:
            await self._withdraw(tid, m)
        await self.store.retire(tid)
        event("trigger_retired", trigger=tid, withdrawn=len(st.future))


async def _guarded(tid: str, step: Awaitable[None]) -> None:
    """One trigger's bad job document or a refused call must not stop the others'; a Redis
    fault goes up, and the round is tried again at its next period."""
    try:
        await step
    except (InvalidJob, ScriptError) as exc:
        event("trigger_mint_failed", trigger=tid, error=str(exc))
