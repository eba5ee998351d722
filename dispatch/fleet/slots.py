"""In-process slots: a counting semaphore per string key, for bounds within one daemon.

    slots = Slots()
    ticket = slots.try_acquire("scope:gpu", limit=2)
    if ticket is None:
        ...  # full: the gate defers
    ...
    slots.release(ticket)

Modelled on anyio's `CapacityLimiter.acquire_nowait`, with two differences that suit gates:

- The limit is given per call rather than fixed per key, so a config reload takes effect on the
  next acquire. Holders above a lowered limit keep their slots; new ones wait until the count
  drops below it.
- A holder is a `Ticket`, not a task. Release goes by ticket identity, so releasing the same
  ticket twice is a no-op that returns False and can never free another holder's slot.

Everything is synchronous and never awaits, so within one event loop an acquire is atomic: no
other task can run between the check and the take. This is also the bound that still holds when
Redis is unreachable and fleet leases fail open.

A key's pool stays once created (its denial count is a statistic worth keeping); keys are meant to
be a config-sized set such as scope names, not job ids.

Folders are not counted here: a folder excludes its whole tree, not just its own name, so the
folder mutex is `folders` (`fleet/folders.py`), carried here so that every gate of a daemon
shares the one set of in-process bounds it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from dispatch.fleet.folders import FolderLocks


class Ticket(msgspec.Struct, frozen=True, eq=False):
    """Proof of one held slot. Compared by identity, so no two tickets are ever equal."""

    key: str
    owner: str = ""  # who holds it (a job id), for `dispatch why`


@dataclass(frozen=True, slots=True)
class SlotStatistics:
    held: int
    limit: int  # the limit of the latest acquire on this key (0 before any)
    denials: int  # acquires refused because the key was full


@dataclass(slots=True)
class _Pool:
    held: set[Ticket] = field(default_factory=set)
    limit: int = 0
    denials: int = 0


class Slots:
    """Counting semaphores keyed by string, all in this process."""

    def __init__(self) -> None:
        self._pools: dict[str, _Pool] = {}
        self.folders = FolderLocks()

    def try_acquire(self, key: str, limit: int, owner: str = "") -> Ticket | None:
        """Take a slot of `key` if fewer than `limit` are held; None when full."""
        if limit < 0:
            raise ValueError(f"slot limit must be >= 0, got {limit}")
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool()
        pool.limit = limit
        if len(pool.held) >= limit:
            pool.denials += 1
            return None
        ticket = Ticket(key, owner)
        pool.held.add(ticket)
        return ticket

    def release(self, ticket: Ticket) -> bool:
        """Give the ticket's slot back; False if it was already released or is not ours."""
        pool = self._pools.get(ticket.key)
        if pool is None or ticket not in pool.held:
            return False
        pool.held.remove(ticket)
        return True

    def holds(self, ticket: Ticket) -> bool:
        pool = self._pools.get(ticket.key)
        return pool is not None and ticket in pool.held

    def statistics(self, key: str) -> SlotStatistics:
        pool = self._pools.get(key)
        if pool is None:
            return SlotStatistics(held=0, limit=0, denials=0)
        return SlotStatistics(held=len(pool.held), limit=pool.limit, denials=pool.denials)

    def owners(self, key: str) -> list[str]:
        pool = self._pools.get(key)
        return sorted(t.owner for t in pool.held) if pool else []

    def keys(self) -> list[str]:
        return sorted(self._pools)
