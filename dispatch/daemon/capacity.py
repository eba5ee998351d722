"""How many more jobs this host may take: a counter with an event that is set while there is
room, so the queue watchers block on the marker only when a claim could follow.

A slot is held from the claim until the job's ending is sent: an ending waiting for its flush
keeps its slot, and the flush hands it straight to the claim it carries (`take(freed=...)`).
Given back at the job's end instead, it would be room for the pump and the watcher, whose own
claim (and BZPOPMIN) would leave the flush claiming nothing: two calls where one does."""

from __future__ import annotations

import asyncio

COHORTS_FROM = 32  # slots from which claims take half of them at most


class Capacity:
    def __init__(self, slots: int, batch: int) -> None:
        self.slots = slots
        self.free = slots
        self._batch = batch
        self._shape(slots)
        self.room = asyncio.Event()
        self.room.set()

    def _shape(self, slots: int) -> None:
        # Most jobs taken by one claim. On a host of many slots, half of them: its jobs then
        # run in two cohorts that take turns, one in the loop while Redis ends the other and
        # claims its successors, where one batch of all would leave the loop idle for every
        # round trip. Fewer slots keep whole batches: halves would double the commands per job.
        self.cohorts = slots >= COHORTS_FROM
        self.batch = min(self._batch, slots // 2 if self.cohorts else slots)

    def resize(self, slots: int) -> None:
        """A new slot count, live: more is room at once; fewer leaves the running jobs be and
        claims nothing until enough of them have ended (`free` below zero until then)."""
        self._shape(slots)
        self.adjust(slots - self.slots)
        self.slots = slots

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
