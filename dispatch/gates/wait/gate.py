"""The wait-for gate: a job with `waitFor` waits for its `after` instant and for its profiles'
checks to answer go (DESIGN section 4, step 6; docs/operating/waiting.md).

Order, free and determinate first: 1. refusals: superseded by a sibling whose wait cleared
     (`wait-superseded`), an `after` that does not read (`wait-unreadable`), an undeclared
     profile (`wait-profile-unknown`), an `after` beyond the ceiling (`wait-after-beyond-max`);
  2. tier 1, an `after` still ahead: claim the identity, defer `wait-after` to the instant;
  3. tier 2, the profiles: a check slot on this host, then the fleet check lease (denied:
     `wait-throttled`), claim the identity, run the profiles in order; the first answer that
     is not go decides (hold `wait-hold`, refuse `wait-refused`, `wait-unanswerable`,
     `wait-expired`, or cut short `wait-aborted`);
  4. all clear: mark the identity cleared, give the claim back, log `wait_cleared`, admit.
Check slot and lease go back as soon as the checks end; the identity claim lasts across the
job's holds and goes back when the wait clears or is refused. A cleared wait is kept in the
wait state, so a later gate's deferral asks nothing again. Arithmetic: `wait_policy.py`;
sentences: `wait_refusals.py`; a pickup's view of its wait: `wait_look.py`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import msgspec

from dispatch.clock import Clock
from dispatch.config.settings import Settings
from dispatch.fleet.leases import FleetLeases, Lease
from dispatch.fleet.slots import Slots
from dispatch.gates.base import (
    ADMIT,
    WAIT_SUPERSEDE_DELAY_MS,
    WAIT_THROTTLE_DELAY_MS,
    Decision,
    Defer,
    Pickup,
    Refuse,
)
from dispatch.gates.wait.conditions import (
    check_target,
    conditions,
    identity,
    label,
)
from dispatch.gates.wait.parts import Checked, Look, WaitParts
from dispatch.gates.wait.policy import (
    THROTTLE_ALARM,
    Held,
    WaitLimits,
    after_hold,
    after_is_due,
    check_slots,
    throttle_delay_ms,
)
from dispatch.gates.wait.profiles import ANSWERS, Answer
from dispatch.gates.wait.refusals import STARVED, gave_up, profile_problem, span, superseded
from dispatch.gates.wait.state import WaitState
from dispatch.log import event
from dispatch.model import iso
from dispatch.reasons import (
    WAIT_ABORTED,
    WAIT_AFTER,
    WAIT_AFTER_BEYOND_MAX,
    WAIT_EXPIRED,
    WAIT_HOLD,
    WAIT_REFUSED,
    WAIT_SUPERSEDE,
    WAIT_THROTTLED,
    WAIT_UNREADABLE,
)

CHECK_KEY = "wait-check"  # the in-process slot and the fleet lease: one bound for every profile
CLAIM_MARGIN_MS = 3_600_000  # a claim outlives the longest wait by this much


@dataclass
class WaitGate:
    settings: Settings
    slots: Slots
    leases: FleetLeases
    parts: WaitParts
    clock: Clock
    name: str = "wait"
    limits: WaitLimits = field(init=False)

    def __post_init__(self) -> None:
        self.limits = WaitLimits.of(self.settings)

    async def check(self, pickup: Pickup) -> Decision:
        if not pickup.job.wait_for:
            return ADMIT
        look = await self._look(pickup)
        if look.state.cleared_ms:  # cleared on an earlier pickup; a later gate deferred it
            return ADMIT
        refusal = await self._determinate(look)
        if refusal is not None:
            return await self._refuse(look, refusal)
        if not after_is_due(look.conds.after_ms, look.now):
            return await self._until_after(look)
        if look.conds.profiles:
            decision = await self._checked(look)
            if decision is not None:
                return decision
        return await self._cleared(look)

    async def _look(self, pickup: Pickup) -> Look:
        job = pickup.job
        stored = await self.parts.states.get(job.queue, job.id)
        conds = conditions(job)
        state = stored or WaitState(target=job.target(), label=label(conds))
        return Look(pickup, conds, identity(job), self.clock.now_ms(), stored, state)

    # -- refusals before any hold -----------------------------------------------------------

    async def _determinate(self, look: Look) -> Refuse | None:
        job, conds = look.pickup.job, look.conds
        if look.identity:
            by = await self.parts.claims.cleared_by(look.identity)
            if by and by != job.id:
                return superseded(job.dedup, by, "already finished waiting")
        if conds.unreadable:
            return Refuse(
                WAIT_UNREADABLE,
                f"waitFor after {conds.unreadable[0]!r} is not an instant this release can"
                " read; not run",
            )
        has_target = bool(check_target(job))
        problem = profile_problem(conds.profiles, look.pickup.config.profiles, has_target)
        if problem is not None:
            return problem
        after = conds.after_ms
        if after is not None and after - look.now > self.limits.after_max_ms:
            return Refuse(
                WAIT_AFTER_BEYOND_MAX,
                f"its after instant {iso(after)} is further out than DISPATCH_WAIT_AFTER_MAX"
                f" ({span(self.limits.after_max_ms)}); not run",
            )
        return None

    async def _refuse(self, look: Look, refusal: Refuse) -> Refuse:
        if look.identity and (look.claimed or look.stored is not None):
            job = look.pickup.job
            await self.parts.claims.release(look.identity, job.queue, job.id)
        return refusal

    async def _claim(self, look: Look) -> Decision | None:
        """Hold the identity; a decision when another job is in the way."""
        if not look.identity:
            return None
        job = look.pickup.job
        ttl = max((look.conds.after_ms or 0) - look.now, 0) + self.limits.max_ms + CLAIM_MARGIN_MS
        got = await self.parts.claims.claim(look.identity, job.queue, job.id, ttl)
        if got.kind == "superseded":
            return superseded(job.dedup, got.holder, "already waits")
        if got.kind == "unknown":
            event("wait_supersede_unverified", job=job.id, holder=got.holder)
            detail = f"whether {got.holder or 'its holder'} is still alive could not be read"
            return Defer(WAIT_SUPERSEDE_DELAY_MS, WAIT_SUPERSEDE, got.holder, detail)
        if got.took_over:
            event("wait_claim_taken_over", job=job.id, previous=got.took_over)
        look.claimed = True
        return None

    # -- tier 1 ------------------------------------------------------------------------------

    async def _until_after(self, look: Look) -> Decision:
        claimed = await self._claim(look)
        if claimed is not None:
            return claimed
        after = look.conds.after_ms or look.now
        state = msgspec.structs.replace(
            look.state, since_ms=look.state.since_ms or look.now, after_ms=after, next_ms=after
        )
        await self._put(look, state)
        event("wait_deferred", job=look.pickup.job.id, until=iso(after), label=state.label)
        return Defer(after - look.now, WAIT_AFTER, detail=f"until {iso(after)}")

    # -- tier 2 ------------------------------------------------------------------------------

    async def _checked(self, look: Look) -> Decision | None:
        slots = look.pickup.config.overlay.slots_for(self.settings.host, self.settings.concurrency)
        limit = check_slots(self.limits, slots)  # the live value: never its last slot
        ticket = self.slots.try_acquire(CHECK_KEY, limit, owner=look.pickup.job.id)
        if ticket is None:
            return await self._throttled(look, "on this host")
        try:
            outcome = await self._leased(look)
        finally:
            self.slots.release(ticket)
        if isinstance(outcome, Checked):
            return await self._answered(look, outcome)
        return outcome

    async def _leased(self, look: Look) -> Decision | Checked:
        abort = asyncio.Event()
        look.pickup.signal.when_aborted(abort.set)
        lease: Lease | None = None
        if self.limits.fleet_checks is not None:
            n = self.limits.fleet_checks
            lease = await self.leases.acquire(CHECK_KEY, n, on_lost=lambda _: abort.set())
            if lease is None:
                event("lease_full_deferred", job=look.pickup.job.id, lease=CHECK_KEY, slots=n)
                return await self._throttled(look, "fleet-wide")
            if lease.degraded:  # this check is not bounded fleet-wide: say so, as hold.take does
                event("lease_granted_degraded", job=look.pickup.job.id, lease=CHECK_KEY)
        try:
            claimed = await self._claim(look)
            return claimed if claimed is not None else await self._ask(look, abort)
        finally:
            if lease is not None:
                await self.leases.release(lease)

    async def _ask(self, look: Look, abort: asyncio.Event) -> Checked:
        """Each profile in the job's order, until one does not answer go."""
        pickup = look.pickup
        target = check_target(pickup.job)
        checked = Checked(Answer("go"), "")
        for name in look.conds.profiles:
            answer = await self.parts.runner.check(pickup.config.profiles[name], target, abort)
            event("wait_checked", job=pickup.job.id, profile=name, verdict=answer.verdict,
                  line=answer.line)  # fmt: skip
            checked = Checked(answer, name)
            if answer.verdict != "go":
                break
        return checked

    async def _answered(self, look: Look, checked: Checked) -> Decision | None:
        answer, name = checked.answer, checked.profile
        if answer.verdict == "aborted":  # learned nothing: count nothing
            event("wait_check_aborted", job=look.pickup.job.id, profile=name)
            detail = f"the check `{name}` was cut short"
            return Defer(WAIT_THROTTLE_DELAY_MS, WAIT_ABORTED, detail=detail)
        if answer.verdict == "never":
            said = f" ({answer.line})" if answer.line else ""
            sentence = f"the check `{name}` answered that this will never clear{said}; not run"
            return await self._refuse(look, Refuse(WAIT_REFUSED, sentence))
        if answer.verdict == "go":
            noted = look.noted(
                self.limits.max_ms, answer, name, checks=look.state.checks + 1, faults=0
            )
            look.state = msgspec.structs.replace(noted, since_ms=look.state.since_ms)
            return None  # a job that cleared at its first check never held
        held = after_hold(
            self.limits,
            fault=answer.verdict == "fault",
            checks=look.state.checks,
            faults=look.state.faults,
            held_ms=look.held_ms,
            random=self.parts.random,
        )
        return await self._hold(look, checked, held)

    async def _hold(self, look: Look, checked: Checked, held: Held) -> Decision:
        name, answer = checked.profile, checked.answer
        if held.kind != "defer":
            return await self._refuse(look, gave_up(held, name, answer, look.held_ms))
        state = look.noted(self.limits.max_ms, answer, name, checks=held.checks, faults=held.faults)
        state = msgspec.structs.replace(state, next_ms=look.now + held.delay_ms)
        await self._put(look, state)
        event("wait_deferred", job=look.pickup.job.id, profile=name, verdict=answer.verdict,
              held_ms=look.held_ms, delay_ms=held.delay_ms)  # fmt: skip
        said = f": {answer.line}" if answer.line else ""
        detail = f"`{name}` answered {ANSWERS[answer.verdict]}{said}"
        return Defer(held.delay_ms, WAIT_HOLD, detail=detail)

    async def _throttled(self, look: Look, where: str) -> Decision:
        job, state = look.pickup.job, look.state
        throttles = state.throttles + 1
        if throttles == THROTTLE_ALARM:
            event("wait_capacity_exceeded", job=job.id, denials=throttles, where=where,
                  hint="raise DISPATCH_WAIT_CHECK_SLOTS or DISPATCH_WAIT_FLEET_CHECKS, "
                  "lengthen DISPATCH_WAIT_INTERVAL, or hold fewer jobs")  # fmt: skip
        if look.held_ms >= self.limits.max_ms:  # a job never granted a check still has a bound
            return await self._refuse(look, Refuse(WAIT_EXPIRED, STARVED))
        delay = throttle_delay_ms(self.limits, look.held_ms, self.parts.random)
        await self._put(look, msgspec.structs.replace(
            state, since_ms=state.since_ms or look.now, throttles=throttles,
            next_ms=look.now + delay, gives_up_ms=look.checks_since + self.limits.max_ms,
        ))  # fmt: skip
        detail = f"every check slot {where} was busy ({throttles} in a row)"
        return Defer(delay, WAIT_THROTTLED, detail=detail)

    # -- all clear ---------------------------------------------------------------------------

    async def _cleared(self, look: Look) -> Decision:
        job, state = look.pickup.job, look.state
        engaged = look.claimed or look.stored is not None
        if look.identity and engaged:
            # said before the claim goes, so a sibling never finds neither
            await self.parts.claims.mark_cleared(look.identity, job.id, self.limits.max_ms)
            await self.parts.claims.release(look.identity, job.queue, job.id)
        if engaged or state.checks:  # remembered, so a later gate's deferral asks nothing again
            await self._put(look, msgspec.structs.replace(state, cleared_ms=look.now, next_ms=0))
        if state.since_ms:  # only a job that really held has cleared a wait
            held = look.now - state.since_ms  # the whole wait, its `after` included
            event("wait_cleared", job=job.id, label=state.label, held_ms=held)
        return ADMIT

    async def _put(self, look: Look, state: WaitState) -> None:
        job = look.pickup.job
        state = msgspec.structs.replace(state, identity=look.identity or "")
        await self.parts.states.put(job.queue, job.id, state)
        look.state = state
