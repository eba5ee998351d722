"""Spend windows: the day, the ISO week (from Monday) and the month an instant falls in, in the
budget time zone (settings.json `budgetTz`, default UTC).

A window is named by its period (`2025-01-31`, `2025-W05`, `2025-01`), which goes into its
counters' keys, and bounded by the instants it starts and turns at. Both bounds are local
midnights turned into instants by zoneinfo; a midnight that a DST change skips starts the day
at the change itself, so a day is 23, 24 or 25 hours long and never has a gap or an overlap.
Instants come from the injected clock of the daemon that reserves (the server's TIME would
need the zone inside Lua); hosts a few seconds apart may put a job at midnight in different
days, which moves one run across a line, never past a cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

WindowKind = Literal["day", "week", "month"]
KINDS: tuple[WindowKind, ...] = ("day", "week", "month")
_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class Window:
    kind: WindowKind
    period: str
    start_ms: int
    end_ms: int  # when it turns: the next window's start


def window(kind: WindowKind, now_ms: int, tz: ZoneInfo) -> Window:
    """The window of `kind` that holds the instant `now_ms`."""
    found = _window_of(kind, _date_at(now_ms, tz), tz)
    if found.end_ms <= now_ms:  # a clock set back across midnight: the day already turned
        found = _window_of(kind, _date_at(found.end_ms, tz), tz)
    return found


def _window_of(kind: WindowKind, today: date, tz: ZoneInfo) -> Window:
    if kind == "day":
        first, after = today, today + timedelta(days=1)
        period = today.isoformat()
    elif kind == "week":
        first = today - timedelta(days=today.weekday())
        after = first + timedelta(days=7)
        year, week, _ = today.isocalendar()
        period = f"{year:04d}-W{week:02d}"
    else:
        first = today.replace(day=1)
        after = date(first.year + first.month // 12, first.month % 12 + 1, 1)
        period = f"{first.year:04d}-{first.month:02d}"
    return Window(kind, period, _midnight_ms(first, tz), _midnight_ms(after, tz))


def _date_at(ms: int, tz: ZoneInfo) -> date:
    return datetime.fromtimestamp(ms // 1000, tz).date()


def _midnight_ms(day: date, tz: ZoneInfo) -> int:
    """The first instant of `day` on the local clock. Usually its midnight; when a DST change
    skips midnight, the change itself (fold=0 maps a skipped time by the old offset, which is
    the change when the gap starts at midnight; otherwise the search finds it)."""
    ms = int(datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()) * 1000
    if _date_at(ms - 1000, tz) < day <= _date_at(ms, tz):
        return ms
    low, high = ms - 2 * _DAY_MS, ms + 2 * _DAY_MS  # offsets never move a day by more
    while high - low > 1000:
        middle = (low + high) // 2000 * 1000
        if _date_at(middle, tz) >= day:
            high = middle
        else:
            low = middle
    return high


def local_text(ms: int, tz: ZoneInfo) -> str:
    """An instant as the operator's clock on the wall shows it: `2025-02-01 00:00 CET`."""
    return datetime.fromtimestamp(ms / 1000, tz).strftime("%Y-%m-%d %H:%M %Z")
