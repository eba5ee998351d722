"""How many more jobs this host may take: a counter with an event that is set while there is
room, so the queue watchers block on the marker only when a claim could follow."""

from __future__ import annotations

import asyncio

COHORTS_FROM = 32  # slots from which claims take half of them at most


class Capacity:
    def __init__(self, slots: int, batch: int) -> None:
        self.free = slots
        # Most jobs taken by one claim. On a host of many slots, half of them: its jobs then
        # run in two cohorts that take turns, one in the loop while Redis ends the other and
        # claims its successors, where one batch of all would leave the loop idle for every
        # round trip. Fewer slots keep whole batches: halves would double the commands per job.
        self.batch = min(batch, slots // 2 if slots >= COHORTS_FROM else slots)
        self.room = asyncio.Event()
        self.room.set()

    def take(self, draining: bool) -> int:
        """Reserve room for one claim call; give back what the call did not use."""
        want = 0 if draining else min(self.free, self.batch)
        self.adjust(-want)
        return want

    def give(self, n: int = 1) -> None:
        self.adjust(n)

    def adjust(self, delta: int) -> None:
        self.free += delta
        if self.free > 0:
            self.room.set()
        else:
            self.room.clear()
