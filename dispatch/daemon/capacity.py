"""How many more jobs this host may take: a counter with an event that is set while there is
room, so the queue watchers block on the marker only when a claim could follow."""

from __future__ import annotations

import asyncio


class Capacity:
    def __init__(self, slots: int, batch: int) -> None:
        self.free = slots
        self.batch = batch  # most jobs taken by one claim
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
