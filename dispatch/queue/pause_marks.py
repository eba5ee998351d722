"""What the fleet pause looks like in Redis, and the queue every daemon reads: plain values
for the readers that load no client (the CLI's quick path); queue/fleet_pause.py keeps it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

SHARED_QUEUE = "jobs"  # every daemon reads it, so it is listed even before its first job
FLEET_MARK = "fleet:"


class FleetPause(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    at: str = ""  # when `dispatch pause` was given (ISO-8601)
    by: str = ""  # the host it was given from

    @property
    def mark(self) -> str:
        """What a queue's `paused` key holds while it carries this pause."""
        return FLEET_MARK + self.id


@dataclass(frozen=True)
class PauseState:
    fleet: FleetPause | None = None
    queues: list[str] = field(default_factory=list)  # queues whose own key is set


def decode(raw: bytes | str | None) -> FleetPause | None:
    """The standing pause; a value that is not our JSON (set by hand) still pauses."""
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=FleetPause)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return FleetPause(id=_text(raw))


def registered_names(members: Iterable[bytes | str]) -> list[str]:
    """The queue registry's members as names, in order, the shared queue always among them."""
    return sorted({_text(n) for n in members} | {SHARED_QUEUE})


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
