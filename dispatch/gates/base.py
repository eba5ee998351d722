"""What a gate answers, and the holds it leaves behind.

A gate is a small object with one async method, `check(pickup) -> Decision`. It never raises
to say no and never reads the wall clock itself. A gate that takes a hold (a slot, a lease)
pushes how to give it back onto `pickup.holds`; the processor gives every hold back, in
reverse order, on every exit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from dispatch.model import Job
from dispatch.queue import Claim


class Admit(msgspec.Struct, frozen=True, tag="admit"):
    pass


class Defer(msgspec.Struct, frozen=True, tag="defer"):
    delay_ms: int
    reason: str
    holder: str | None = None
    detail: str = ""


class Refuse(msgspec.Struct, frozen=True, tag="refuse"):
    reason: str
    sentence: str


Decision = Admit | Defer | Refuse
ADMIT = Admit()

Release = Callable[[], Awaitable[Any] | None]


@dataclass
class Pickup:
    """One claimed job on its way through the gates."""

    claim: Claim
    job: Job
    holds: list[tuple[str, Release]] = field(default_factory=list)

    def hold(self, name: str, release: Release) -> None:
        self.holds.append((name, release))


class Gate(Protocol):
    name: str

    async def check(self, pickup: Pickup) -> Decision: ...
