"""What `dispatch status` adds to the fleet snapshot from this machine's config files: each
spend ledger's standing (the `budget` view) and each trigger's next, last and overdue (the
`triggers` view). The snapshot itself is Redis's alone (dispatch/fleet/view.py); these need
scoped-limits.json and triggers.json to know the caps and the schedules."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from dispatch.config.schemas import ConfigSnapshot
from dispatch.config.settings import Settings
from dispatch.spend.plan import MICRO
from dispatch.spend.standing import Line


@dataclass
class Extras:
    spend: list[Line] = field(default_factory=list)
    triggers: list[dict[str, Any]] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # config files read from a last good copy
    missing: str = ""  # why spend and triggers are not shown

    @property
    def overdue(self) -> list[str]:
        return [t["id"] for t in self.triggers if t.get("overdue")]

    def today(self) -> Line | None:
        """The dollar day window an operator asks about first: the fleet's own, else the one
        nearest its cap."""
        days = [s for s in self.spend if s.metric == "usd" and s.window == "day" and s.cap]
        whole = [s for s in days if s.ledger == "the whole fleet"]
        ranked = whole or sorted(days, key=lambda s: -(s.used + s.in_flight) / s.cap)
        return ranked[0] if ranked else None

    def as_json(self) -> dict[str, Any]:
        return {
            "spend": [s.as_json() for s in self.spend],
            "triggers": self.triggers,
            "overdue": self.overdue,
        }


async def extras(
    redis: Redis,
    settings: Settings,
    at_ms: int,
    timeout_s: float = 5.0,
    config: ConfigSnapshot | None = None,
) -> Extras:
    """Bounded like the snapshot: a Redis that stops answering after the snapshot was read
    gives a status without these parts and a line saying so, never a hang."""
    try:
        return await asyncio.wait_for(_extras(redis, settings, at_ms, config), timeout_s)
    except TimeoutError:
        return Extras(missing=f"spend and triggers: Redis did not answer within {timeout_s:g} s")


async def _extras(
    redis: Redis, settings: Settings, at_ms: int, config: ConfigSnapshot | None
) -> Extras:
    """`config`: the caller's copy of the files (the web page keeps a watcher); else read."""
    from dispatch.config.watcher import load_once
    from dispatch.spend.standing import lines
    from dispatch.triggers import control
    from dispatch.triggers.spec import compile_all
    from dispatch.triggers.store import TriggerStore

    config = config or load_once(settings.config_dir)
    spent = await lines(redis, settings.prefix, config.limits, config.overlay, at_ms)
    store = TriggerStore(redis, settings.prefix)
    rows = await control.rows(store, compile_all(config.triggers), at_ms)
    wanted = ("scoped-limits.json", "triggers.json", "settings.json")
    return Extras(spent, rows, [name for name in wanted if name in config.errors])


def dollars(micro: int) -> str:
    return f"${micro / MICRO:,.2f}"
