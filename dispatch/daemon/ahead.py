"""Claims waiting for a run slot. A host that claims ahead (daemon/capacity.py) still runs at
most its slots at once: a claim beyond them waits here, in claim order, and begins as a run
ends (the worker asks `next`).

A waiting claim is this host's as a running one is (`Lane.recover` counts it), but it runs
nothing and nothing renews it, so it waits briefly: one not begun within `HOLD_S` goes back to
the head of its queue, with no attempt or stall counted (`Queue.hand_back`), and the host stops
claiming ahead (`Capacity.cool`). A draining daemon hands back every one still waiting. A
hand-back Redis did not answer leaves its claims to `Lane.recover`, which hands back the claims
of this host that nobody here runs (the worker marks the lane unsure).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from dispatch.clock import Clock
from dispatch.daemon.capacity import Capacity
from dispatch.log import event
from dispatch.queue.transitions import Claim

HOLD_S = 0.1  # longest wait for a slot: four fast runs of one slot (capacity.AHEAD_PER_SLOT)
HandBack = Callable[[list[Claim]], Awaitable[None]]


class Ahead:
    def __init__(self, capacity: Capacity, clock: Clock, hand_back: HandBack) -> None:
        self.capacity = capacity
        self.clock = clock
        self.hand_back = hand_back  # to the claims' queues; the slots come back here after
        self.hold_s = HOLD_S  # read per instance: bench/support/ahead_worker.py may set HOLD_S
        self.waiting: deque[tuple[Claim, float, float]] = deque()  # claim, its call's send, since
        self.returning: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._giving: list[Claim] | None = None  # given back, their hand-back not yet started

    def __len__(self) -> int:
        return len(self.waiting)

    def pairs(self) -> set[tuple[str, str]]:
        """(job id, lock token) of every waiting claim."""
        return {(claim.id, claim.token) for claim, _, _ in self.waiting}

    def hold(self, claim: Claim, sent: float) -> None:
        self.waiting.append((claim, sent, self.clock.monotonic()))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.hold_s, self.expire)

    def next(self) -> tuple[Claim, float] | None:
        """The longest-waiting claim and when its call was sent, for a slot that just freed."""
        if not self.waiting:
            return None
        claim, sent, _ = self.waiting.popleft()
        return claim, sent

    def expire(self) -> None:
        """Hand back the claims that waited `hold_s`; look again when the next one will have."""
        self._timer = None
        now = self.clock.monotonic()
        stale: list[Claim] = []
        while self.waiting and now - self.waiting[0][2] >= self.hold_s:
            stale.append(self.waiting.popleft()[0])
        if stale:
            self.capacity.cool()
            self.give_back(stale)
        if self.waiting:
            left = self.waiting[0][2] + self.hold_s - now
            self._timer = asyncio.get_running_loop().call_later(left, self.expire)

    async def hand_back_all(self) -> None:
        """Every waiting claim back to its queue, and the hand-backs under way landed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        claims = [claim for claim, _, _ in self.waiting]
        self.waiting.clear()
        if claims:
            self.give_back(claims)
        if self.returning:
            await asyncio.wait(set(self.returning))

    def give_back(self, claims: list[Claim]) -> None:
        """Back to their queues, in the background; their room comes back once they are.
        Claims given back in the same loop step (a late batch, one claim at a time) go in one
        hand-back, not one each."""
        if self._giving is not None:  # its hand-back has not started: they go with it
            self._giving += claims
            return
        self._giving = list(claims)
        task = asyncio.get_running_loop().create_task(self._hand_back_given())
        self.returning.add(task)
        task.add_done_callback(self.returning.discard)

    async def _hand_back_given(self) -> None:
        claims, self._giving = self._giving or [], None
        try:
            await self.hand_back(claims)
        except Exception as exc:  # a bug: the hand-back handles Redis faults itself
            event("task_failed", task="hand back", error=f"{type(exc).__name__}: {exc}")
        finally:
            self.capacity.give(len(claims))
