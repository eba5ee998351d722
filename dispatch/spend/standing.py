"""Each ledger's state for `dispatch budget`: per row, window and metric, what is used, what
is in flight (reserved by runs not settled yet), the cap, where its soft-hold band starts and
when the window turns. Read from the same counter keys the gate reserves in, in one round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from dispatch.config.limits import parse_scope, zone
from dispatch.config.schemas import Overlay, ScopedLimit
from dispatch.queue.keys import budget_keys
from dispatch.spend.plan import MICRO, Metric, caps_of, ledger_of, soft_of
from dispatch.spend.windows import local_text, window


@dataclass(frozen=True, slots=True)
class Line:
    ledger: str  # "acme/web", "folder site", "project web", "the whole fleet"
    metric: Metric
    window: str
    period: str
    used: int  # runs, micro-dollars or tokens
    in_flight: int
    cap: int
    soft: int
    turns: str  # local time in budgetTz

    def as_json(self) -> dict[str, Any]:
        scale = MICRO if self.metric == "usd" else 1
        numbers = {"used": self.used, "inFlight": self.in_flight, "cap": self.cap}
        numbers["softFrom"] = self.soft
        return {
            "ledger": self.ledger,
            "metric": self.metric,
            "window": self.window,
            "period": self.period,
            **{k: v / scale if scale != 1 else v for k, v in numbers.items()},
            "turns": self.turns,
        }


async def lines(
    redis: Redis, prefix: str, rows: Sequence[ScopedLimit], overlay: Overlay, now_ms: int
) -> list[Line]:
    tz = zone(overlay.budget_tz)
    keys = budget_keys(prefix)
    planned: list[tuple[Line, str]] = []
    for row in rows:
        ledger = ledger_of(parse_scope(row.scope))
        pct = row.soft_hold_pct if row.soft_hold_pct is not None else overlay.soft_hold_pct
        for metric, kind, cap in caps_of(row):
            w = window(kind, now_ms, tz)
            key = keys.counter(f"{metric}:{ledger.key_id}:{w.period}")
            line = Line(
                ledger.label,
                metric,
                kind,
                w.period,
                0,
                0,
                cap,
                soft_of(cap, pct),
                local_text(w.end_ms, tz),
            )
            planned.append((line, key))
    if not planned:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for _, key in planned:
            pipe.hmget(key, "used", "held")
        replies = await pipe.execute()
    return [_filled(line, reply) for (line, _), reply in zip(planned, replies, strict=True)]


def _filled(line: Line, reply: list[Any]) -> Line:
    used, held = (int(x or 0) for x in reply)
    return Line(
        line.ledger,
        line.metric,
        line.window,
        line.period,
        used,
        held,
        line.cap,
        line.soft,
        line.turns,
    )
