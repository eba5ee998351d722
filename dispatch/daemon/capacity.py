"""How many more jobs this host may claim: a counter with an event that is set while there is
room, so the queue watchers block on the marker only when a claim could follow.

A slot is held from the claim until the job's ending is sent: an ending waiting for its flush
keeps its slot, and the flush hands it straight to the claim it carries (`take(freed=...)`).
Given back at the job's end instead, it would be room for the pump and the watcher, whose own
claim (and BZPOPMIN) would leave the flush claiming nothing: two calls where one does.

Claiming ahead. A host of fewer than `COHORTS_FROM` slots runs one cohort: its loop waits out
every round trip, and each round trip's fixed cost in Redis commands is shared by only its few
slots. Once `AHEAD_AFTER` runs in a row have each ended within `FAST_RUN_S`, it claims as a host
of `AHEAD_CLAIMS` would (two cohorts that take turns) while still running `slots` jobs at once,
and never more than `AHEAD_PER_SLOT` claims a slot, so that a tiny host's waiting claims too can
begin within the wait daemon/ahead.py allows them (HOLD_S, 100 ms) at that pace;
the claims beyond them wait for a run to end (daemon/ahead.py). One run that took longer, or a
waiting claim handed back because no run ended in time (`cool`), ends it.
"""

from __future__ import annotations

import asyncio

COHORTS_FROM = 32  # claims from which a call takes half of them at most
AHEAD_CLAIMS = 48  # claims a small host holds while it claims ahead: two cohorts of 24
AHEAD_AFTER = 32  # fast runs in a row before a small host claims ahead
FAST_RUN_S = 0.025  # a run (its gates included) this short leaves a waiting claim little wait
AHEAD_PER_SLOT = 5  # 1 + HOLD_S / FAST_RUN_S: four waiting per slot begin within HOLD_S


class Capacity:
    def __init__(self, slots: int, batch: int) -> None:
        self.slots = slots  # jobs run at once
        self.claims = slots  # claims held at once: the slots, or more when ahead (_claims_for)
        self.free = slots
        self.fast = 0  # runs in a row that ended within FAST_RUN_S
        self._batch = batch
        self._shape()
        self.room = asyncio.Event()
        self.room.set()

    def _shape(self) -> None:
        # Most jobs taken by one claim. On a host of many claims, half of them: its jobs then
        # run in two cohorts that take turns, one in the loop while Redis ends the other and
        # claims its successors, where one batch of all would leave the loop idle for every
        # round trip. Fewer keep whole batches: halves would double the commands per job.
        self.cohorts = self.claims >= COHORTS_FROM
        self.batch = min(self._batch, self.claims // 2 if self.cohorts else self.claims)

    @property
    def ahead(self) -> bool:
        """Whether this host claims beyond its slots now."""
        return self.claims > self.slots

    def resize(self, slots: int) -> None:
        """A new slot count, live: more is room at once; fewer leaves the running jobs be and
        claims nothing until enough of them have ended (`free` below zero until then)."""
        ahead = self.ahead
        self.slots = slots
        self._claim_up_to(self._claims_for(ahead))

    def ran(self, seconds: float) -> None:
        """A run ended after `seconds`, its gates included: claim ahead once runs are fast."""
        self.fast = self.fast + 1 if seconds < FAST_RUN_S else 0
        claims = self._claims_for(self.fast >= AHEAD_AFTER)
        if claims != self.claims:  # a host of cohorts never claims ahead: nothing to reshape
            self._claim_up_to(claims)

    def cool(self) -> None:
        """A claim waited for a run to end and none did in time: runs are long again."""
        self.fast = 0
        if self.ahead:
            self._claim_up_to(self.slots)

    def _claims_for(self, ahead: bool) -> int:
        if not ahead or self.slots >= COHORTS_FROM:
            return self.slots
        return min(AHEAD_CLAIMS, self.slots * AHEAD_PER_SLOT)

    def _claim_up_to(self, claims: int) -> None:
        self.adjust(claims - self.claims)
        self.claims = claims
        self._shape()

    def take(self, draining: bool, freed: int = 0) -> int:
        """Reserve room for one claim call; give back what the call did not use. `freed`: the
        slots of the endings the same call sends, given back in the same step."""
        room = self.free + freed
        want = 0 if draining else max(min(room, self.batch), 0)  # room < 0 after a resize
        self.adjust(freed - want)
        return want

    def give(self, n: int = 1) -> None:
        self.adjust(n)

    def adjust(self, delta: int) -> None:
        self.free += delta
        if self.free > 0:
            self.room.set()
        else:
            self.room.clear()
